"""Save and load the course models: safetensors weights, a JSON card, sha256 in a manifest.

``data/models/manifest.json`` records each model's file and checksum; ``load`` refuses a file
whose checksum differs (a corrupted download, a half-finished training run, an edit by hand)
and says how to get a good copy. Nothing is fetched from the network.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from course import paths
from course.model import LanguageModel, ModelConfig

MODELS = paths.DATA / "models"
MANIFEST = "manifest.json"  # in each folder of models: name -> file, sha256, parameters


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(2**20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    return json.loads(path.read_text()) if path.exists() else {}


def save(model: LanguageModel, name: str, card: dict, folder: Path = MODELS) -> Path:
    """Write ``name``'s weights and card, and record the weights' checksum in the manifest."""
    from safetensors.torch import save_file

    target = folder / name
    target.mkdir(parents=True, exist_ok=True)
    weights = target / "model.safetensors"
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(state, weights, metadata={"name": name})
    weights.chmod(0o644)
    (target / "card.json").write_text(json.dumps({"config": model.config.to_dict(), **card}, indent=1) + "\n")
    manifest = _manifest(folder)
    manifest[name] = {
        "file": f"{name}/model.safetensors",
        "sha256": sha256(weights),
        "parameters": model.num_parameters(),
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return weights


def card(name: str, folder: Path = MODELS) -> dict:
    """The model's card: config, training settings, losses and samples."""
    return json.loads(paths.require(folder / name / "card.json").read_text())


def _restore() -> str:
    """How to get the course's checkpoints back: from git and ``make model`` in the repository, from
    the folder as handed out in the learners' copy (which has neither)."""
    from course import withheld

    if withheld.in_learners_copy():
        return "unpack the course folder your instructor gave you again (its data/models holds them)"
    return "restore them with `git checkout -- data/models` (or `git lfs pull`), or retrain with `make model`"


def load(
    name: str, device: torch.device | str | None = None, folder: Path = MODELS, max_seq_len: int | None = None
) -> LanguageModel:
    """The trained model ``name`` ("target" or "draft"), checked against its recorded sha256.

    ``max_seq_len`` extends the rotary tables beyond the trained length (for timing long
    generations; quality beyond the training windows of 256 bytes degrades).
    """
    from safetensors.torch import load_file

    manifest = _manifest(folder)
    if name not in manifest:
        known = ", ".join(sorted(manifest)) or "none"
        raise FileNotFoundError(f"no checkpoint named {name!r} in {folder} (known: {known}); {_restore()}")
    weights = folder / manifest[name]["file"]
    if not weights.exists():
        raise FileNotFoundError(f"{weights} is missing: {_restore()}")
    actual = sha256(weights)
    if actual != manifest[name]["sha256"]:
        raise ValueError(
            f"checksum mismatch for {weights.name} of {name}: expected {manifest[name]['sha256'][:12]}..., "
            f"found {actual[:12]}...; the file is corrupted or was changed: {_restore()}"
        )
    settings = card(name, folder)["config"]
    config = ModelConfig(**{**settings, "max_seq_len": max_seq_len or settings["max_seq_len"]})
    model = LanguageModel(config)
    model.load_state_dict(load_file(weights))
    return model.to(device or "cpu").eval()
