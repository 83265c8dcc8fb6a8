"""Held out means held out for `accuracy`: a policy whose weights or activation scales are fitted
on the shipped calibration text (GPTQ / AWQ, [activations], a calibrated pruning step) is not
scored on a corpus that holds that text (the calibration part itself, or a file copying its
lines); refused in one line before the model is read. A policy that calibrates on random token
ids, or fits nothing, may score any text."""

from __future__ import annotations

from importlib import resources

import pytest

from harmony_ref.cli import main
from harmony_ref.eval.lm_accuracy import Corpus, check_calibration_disjoint
from harmony_ref.quant.policy import load_policy

GPTQ = """name = "int4-gptq"
default = "int4-g32"

[quantize]
method = "gptq"
calibration = "{calibration}"
"""


def _calibration_text() -> str:
    return (resources.files("harmony_ref") / "data" / "lm_corpus" / "calibration.txt").read_text()


@pytest.fixture
def gptq(tmp_path):
    path = tmp_path / "gptq.toml"
    path.write_text(GPTQ.format(calibration="corpus"))
    return path


def test_a_calibrated_policy_is_not_scored_on_its_calibration_text(
    gptq, tmp_path, tiny_gguf, capsys
):
    copy = tmp_path / "mine.txt"
    # a text that copies one line of the calibration part among its own
    line = next(ln for ln in _calibration_text().splitlines() if len(ln) >= 40)
    copy.write_text("A text of my own, written for this test.\n" + line + "\nAnd more of mine.\n")
    argv = ["accuracy", "--model", str(tiny_gguf), "--policy", str(gptq), "--corpus", str(copy)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "holds the calibration text (its line" in err and "int4-gptq" in err
    assert len(err.splitlines()) == 1
    whole = tmp_path / "calibration.txt"
    whole.write_text(_calibration_text())
    with pytest.raises(ValueError, match="holds the calibration text that int4-gptq"):
        check_calibration_disjoint(Corpus.from_file(whole), [load_policy(gptq)])


def test_held_out_text_random_calibration_and_uncalibrated_policies_are_scored(gptq, tmp_path):
    held = Corpus.shipped("heldout")
    check_calibration_disjoint(held, [load_policy(gptq)])
    calibration = Corpus.shipped("calibration")
    check_calibration_disjoint(calibration, [load_policy("int8"), "as-stored"])
    rnd = tmp_path / "rnd.toml"
    rnd.write_text(GPTQ.format(calibration="random"))
    check_calibration_disjoint(calibration, [load_policy(rnd)])
    with pytest.raises(ValueError, match="held out means held out"):
        check_calibration_disjoint(calibration, [load_policy("int8"), load_policy(gptq)])
