"""The committed checkpoints: present, matching their checksums, and good enough on held-out plays.

A quick subset of the held-out text here; `make bench` evaluates all of it.
"""

import pytest
import torch

from course import checkpoints, corpus, evaluation
from course.model import CONFIGS, generate

BARS = {"target": 1.75, "draft": 2.3}  # nats per byte on the held-out plays


@pytest.fixture(scope="module", params=sorted(BARS))
def trained(request):
    return request.param, checkpoints.load(request.param)


def test_checkpoint_matches_its_config_and_checksum(trained):
    name, model = trained
    assert model.config == CONFIGS[name]
    manifest = checkpoints._manifest(checkpoints.MODELS)[name]
    assert manifest["sha256"] == checkpoints.sha256(checkpoints.MODELS / manifest["file"])
    assert manifest["parameters"] == model.num_parameters()


def test_quality_bar_on_held_out_plays(trained):
    name, model = trained
    loss = evaluation.text_loss(model, corpus.tokens("validation"), max_windows=48)
    assert loss <= BARS[name], f"{name}: {loss:.3f} nats/byte on held-out plays, bar {BARS[name]}"
    card = checkpoints.card(name)
    assert card["validation_loss"] <= BARS[name]
    assert abs(card["validation_loss"] - loss) < 0.1  # the quick estimate agrees with the full evaluation


def test_the_target_is_much_better_than_the_draft_and_ten_times_larger():
    target, draft = checkpoints.load("target"), checkpoints.load("draft")
    assert 8 <= target.num_parameters() / draft.num_parameters() <= 20
    assert checkpoints.card("target")["validation_loss"] < checkpoints.card("draft")["validation_loss"] - 0.1


def test_samples_read_like_a_play():
    model = checkpoints.load("target")
    prompt = corpus.encode("\n\nHAMLET:\n")[None]
    text = corpus.decode(
        generate(model, prompt, 300, temperature=0.7, top_k=20, generator=torch.Generator().manual_seed(0))[0]
    )
    lines = [line for line in text.split("\n") if line.strip()]
    speakers = [line for line in lines if line.endswith(":") and line[:-1].replace(" ", "").isalpha()]
    assert len(speakers) >= 2, text  # speaker names on their own lines
    verse = [line for line in lines if not line.endswith(":") and 15 <= len(line) <= 70]
    assert len(verse) >= 4, text  # lines of verse length
