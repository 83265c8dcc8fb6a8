"""Sensitivity and the planner on a decoder (tiny GGUF written by the test): groups by type and
by block, scored on the calibration part only (never the held-out part), cached rows, the
knapsack plan within its budget, scored on the held-out part; bad input exit 2 before work."""

import json

import pytest

import harmony_ref.eval.lm as lm
from harmony_ref.cli import main
from harmony_ref.eval.lm_accuracy import Corpus
from harmony_ref.eval.lm_plan import (group_patterns, group_shapes, lm_plan, lm_sensitivity,
                                      stored_bytes)
from harmony_ref.quant.policy import parse_format
from tests.fixtures.decoder.tiny import tiny_config, write_tiny_gguf


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("lmplan") / "tiny.gguf"
    write_tiny_gguf(path)
    return path


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HARMONY_REF_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_groups_cover_every_linear_once():
    c = tiny_config()
    types = group_patterns(c, "type")
    assert [g for g, _ in types][-1] == "lm_head" and len(types) == 8
    blocks = group_patterns(c, "block")
    assert [p for _, p in blocks] == ["model.layers.0.*", "model.layers.1.*"]
    fp32 = parse_format("fp32")
    per_type = sum(stored_bytes(fp32, group_shapes(c, g, "type")) for g, _ in types)
    per_block = sum(stored_bytes(fp32, group_shapes(c, g, "block")) for g, _ in blocks)
    assert per_type == per_block + 4 * c.vocab_size * c.dim  # the head is in no block


def test_sensitivity_scores_the_calibration_part_only(tiny_gguf, monkeypatch):
    seen = []
    real = lm.chunk_tokens

    def spy(tokens, *a, **k):
        seen.append(len(tokens))
        return real(tokens, *a, **k)
    monkeypatch.setattr(lm, "chunk_tokens", spy)
    from harmony_ref.runtime.loader import load_decoder

    _, tok = load_decoder(str(tiny_gguf))
    rows = lm_sensitivity(str(tiny_gguf), "int4-g32", "type", context=32, chunks=2)
    assert set(seen) == {len(tok.encode(Corpus.shipped("calibration").text))}
    assert [r["group"] for r in rows][:2] == ["q_proj", "k_proj"] and len(rows) == 8
    assert all(r["kld_mean"] > 0 and r["bytes"] < r["bytes_fp32"] for r in rows)
    assert all("calibration" in r["corpus"] and r["scored_tokens"] == 2 * 15 for r in rows)
    # cached: a second call measures nothing
    monkeypatch.setattr(lm, "evaluate_lm", None)
    import harmony_ref.eval.lm_plan as lm_plan_mod

    monkeypatch.setattr(lm_plan_mod, "evaluate_lm", None)
    assert lm_sensitivity(str(tiny_gguf), "int4-g32", "type", context=32, chunks=2) == rows


def test_plan_fits_the_budget_and_is_scored_held_out(tiny_gguf, tmp_path, capsys):
    c = tiny_config()
    types = [g for g, _ in group_patterns(c, "type")]
    int8 = sum(stored_bytes(parse_format("int8"), group_shapes(c, t, "type")) for t in types)
    budget = int8 / 1e6
    plan = lm_plan(str(tiny_gguf), budget, context=32, chunks=1)
    assert plan.linear_bytes <= plan.budget_bytes and set(plan.choices) == set(types)
    out = tmp_path / "plan.toml"
    argv = ["plan", "--model", str(tiny_gguf), "--budget-mb", f"{budget:.6f}", "--context", "32",
            "--chunks", "1", "--out", str(out), "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["formats_per_type"] == plan.choices and "heldout" in d["heldout"]
    assert d["linear_weights_mb"] <= budget and out.read_text() == d["policy_toml"]
    assert main(["accuracy", "--model", str(tiny_gguf), "--policy", str(out), "--context", "32",
                 "--chunks", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][1]["kld_mean"] == d["heldout_kld_mean"]


def test_sensitivity_command_by_block(tiny_gguf, capsys):
    assert main(["sensitivity", "--model", str(tiny_gguf), "--by", "block", "--context", "32",
                 "--chunks", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert sorted(g["group"] for g in d["groups"]) == ["block 0", "block 1"]
    assert "calibration" in d["scored_on"]
    assert main(["sensitivity", "--model", str(tiny_gguf), "--context", "32", "--chunks", "1",
                 "--top", "3"]) == 0
    assert "calibration corpus" in capsys.readouterr().out


@pytest.mark.parametrize("argv,pattern", [
    (["plan", "--budget-mb", "0.000001"], "below the smallest possible"),
    (["plan", "--budget-mb", "-1"], "must be positive"),
    (["sensitivity", "--format", "int3"], "unknown weight format"),
    (["sensitivity", "--pairs", "x.tsv"], "applies to --model all-minilm-l6"),
])
def test_bad_input_exit_2(tiny_gguf, capsys, argv, pattern):
    assert main([*argv, "--model", str(tiny_gguf)]) == 2
    err = capsys.readouterr().err.strip()
    assert pattern in err and len(err.splitlines()) == 1, err
