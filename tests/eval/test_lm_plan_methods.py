"""GPTQ / AWQ in sensitivity and the planner (eval/lm_sensitivity.py, eval/lm_plan.py) on a tiny
GGUF written by the test: `sensitivity --method` measures each group fitted by the method
(calibrated on the calibration part's unscored tokens), and `plan --methods` chooses among
(format, method) pairs: the planned policy names the chosen methods and is scored held out."""

import json

import pytest

from harmony_ref.cli import main
from harmony_ref.eval.lm_plan import lm_plan
from harmony_ref.eval.lm_sensitivity import lm_sensitivity


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HARMONY_REF_CACHE", str(tmp_path / "cache"))


def test_sensitivity_by_method(tiny_gguf, capsys):
    rtn = lm_sensitivity(str(tiny_gguf), "int4-g32", "type", context=32, chunks=1)
    gptq = lm_sensitivity(str(tiny_gguf), "int4-g32", "type", context=32, chunks=1, method="gptq")
    assert [r["group"] for r in gptq] == [r["group"] for r in rtn]
    assert all(r["method"] == "gptq" and r["bytes"] == s["bytes"] for r, s in zip(gptq, rtn))
    assert [r["kld_mean"] for r in gptq] != [r["kld_mean"] for r in rtn]
    assert (
        main(
            [
                "sensitivity",
                "--model",
                str(tiny_gguf),
                "--method",
                "awq",
                "--context",
                "32",
                "--chunks",
                "1",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["method"] == "awq"
    with pytest.raises(ValueError, match="--method gptq fits int4 / int8 weights"):
        lm_sensitivity(str(tiny_gguf), "fp16", "type", context=32, chunks=1, method="gptq")


def test_plan_chooses_format_method_pairs(tiny_gguf, capsys):
    plan = lm_plan(
        str(tiny_gguf),
        1.0,
        formats=("int8", "int4-g32"),
        context=32,
        chunks=1,
        methods=("rtn", "gptq"),
    )
    assert set(plan.methods.values()) <= {"rtn", "gptq"} and len(plan.methods) == 8
    for t, m in plan.methods.items():
        name = (
            "lm_head"
            if t == "lm_head"
            else f"model.layers.0.{'self_attn' if t[0] in 'qkvo' else 'mlp'}.{t}"
        )
        assert plan.policy.method_for(name) == m
    assert (
        main(
            [
                "plan",
                "--model",
                str(tiny_gguf),
                "--budget-mb",
                "1",
                "--methods",
                "rtn,gptq",
                "--context",
                "32",
                "--chunks",
                "1",
                "--json",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert set(d["methods_per_type"].values()) <= {"rtn", "gptq"}
    with pytest.raises(ValueError, match="--methods rtn,gptqq"):
        lm_plan(str(tiny_gguf), 1.0, methods=("rtn", "gptqq"))
