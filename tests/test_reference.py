"""The stored reference numbers are what the package regenerates, and say what they are."""

import json

import pytest

from course import paths, quant, reference


@pytest.mark.parametrize("topic", sorted(reference.TOPICS))
def test_regeneration_reproduces_the_stored_numbers(topic):
    assert reference.compare(topic) == []


@pytest.mark.parametrize("topic", sorted(reference.TOPICS))
def test_every_number_has_a_tolerance_and_a_description(topic):
    for name, entry in reference.load(topic).items():
        assert set(entry) == {"value", "tolerance", "how"}, name
        assert entry["tolerance"] >= 0 and entry["how"], name


def test_no_stray_reference_files():
    stored = {p.stem for p in paths.REFERENCE.glob("*.json")}
    assert stored == set(reference.TOPICS)


def test_quantization_numbers_agree_with_hand_arithmetic():
    numbers = reference.load("quantization")
    assert numbers["int4_g64_fp16_bits"]["value"] == 4 + 16 / 64
    assert numbers["nf4_double_quant_bits"]["value"] == pytest.approx(4 + 8 / 64 + 32 / (64 * 256))
    assert numbers["outlier_error_ratio_int8_row"]["value"] > 2  # outliers more than double the error
    # each extra 4 bits divides the error by about 2^4 on well-behaved weights
    ratio = numbers["clean_int4_row"]["value"] / numbers["clean_int8_row"]["value"]
    assert 12 < ratio < 20


def test_compare_reports_a_drifted_number(tmp_path, monkeypatch):
    stored = reference.load("quantization")
    stored["int4_g64_fp16_bits"]["value"] = 4.5
    (tmp_path / "quantization.json").write_text(json.dumps(stored))
    monkeypatch.setattr(paths, "REFERENCE", tmp_path)
    assert any("int4_g64_fp16_bits" in p for p in reference.compare("quantization"))


def test_close_uses_the_tolerance():
    entry = {"value": 1.0, "tolerance": 0.1}
    assert reference.close(entry, 1.05) and not reference.close(entry, 1.2)
    assert not reference.close(entry, float("nan"))
    assert quant.effective_bits(4, 64) == 4.25
