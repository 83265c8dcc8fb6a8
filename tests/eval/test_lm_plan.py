"""Sensitivity and the planner on a decoder (tiny GGUF written by the test): groups by type and
by block, scored on the calibration part only (never the held-out part), cached rows, the
knapsack plan within its budget, scored on the held-out part; bad input exit 2 before work."""

import json

import pytest

import harmony_ref.eval.lm as lm
from harmony_ref.cli import main
from harmony_ref.eval.lm_accuracy import Corpus
from harmony_ref.eval.lm_plan import lm_plan
from harmony_ref.eval.lm_sensitivity import (
    group_patterns,
    group_shapes,
    lm_sensitivity,
    stored_bytes,
)
from harmony_ref.quant.policy import parse_format
from tests.fixtures.decoder.tiny import tiny_config


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
    import harmony_ref.eval.lm_sensitivity as lm_sensitivity_mod

    monkeypatch.setattr(lm_sensitivity_mod, "evaluate_lm", None)
    assert lm_sensitivity(str(tiny_gguf), "int4-g32", "type", context=32, chunks=2) == rows


def test_plan_fits_the_budget_and_is_scored_held_out(tiny_gguf, tmp_path, capsys):
    c = tiny_config()
    types = [g for g, _ in group_patterns(c, "type")]
    int8 = sum(stored_bytes(parse_format("int8"), group_shapes(c, t, "type")) for t in types)
    budget = int8 / 1e6
    plan = lm_plan(str(tiny_gguf), budget, context=32, chunks=1)
    assert plan.linear_bytes <= plan.budget_bytes and set(plan.choices) == set(types)
    out = tmp_path / "plan.toml"
    argv = [
        "plan",
        "--model",
        str(tiny_gguf),
        "--budget-mb",
        f"{budget:.6f}",
        "--context",
        "32",
        "--chunks",
        "1",
        "--out",
        str(out),
        "--json",
    ]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["formats_per_type"] == plan.choices and "heldout" in d["heldout"]
    assert d["linear_weights_mb"] <= budget and out.read_text() == d["policy_toml"]
    assert (
        main(
            [
                "accuracy",
                "--model",
                str(tiny_gguf),
                "--policy",
                str(out),
                "--context",
                "32",
                "--chunks",
                "1",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["rows"][1]["kld_mean"] == d["heldout_kld_mean"]


def test_sensitivity_command_by_block(tiny_gguf, capsys):
    assert (
        main(
            [
                "sensitivity",
                "--model",
                str(tiny_gguf),
                "--by",
                "block",
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
    assert sorted(g["group"] for g in d["groups"]) == ["block 0", "block 1"]
    assert "calibration" in d["scored_on"]
    assert (
        main(
            [
                "sensitivity",
                "--model",
                str(tiny_gguf),
                "--context",
                "32",
                "--chunks",
                "1",
                "--top",
                "3",
            ]
        )
        == 0
    )
    assert "calibration corpus" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,pattern",
    [
        (["plan", "--budget-mb", "0.000001"], "below the smallest possible"),
        (["plan", "--budget-mb", "-1"], "must be a finite number > 0"),
        (["sensitivity", "--format", "int3"], "unknown weight format"),
        (["sensitivity", "--pairs", "x.tsv"], "applies to --model all-minilm-l6"),
    ],
)
def test_bad_input_exit_2(tiny_gguf, capsys, argv, pattern):
    assert main([*argv, "--model", str(tiny_gguf)]) == 2
    err = capsys.readouterr().err.strip()
    assert pattern in err and len(err.splitlines()) == 1, err


# ----------------------------------------------------------------------------------------------
# Pruning and W8A8 in sensitivity and in the planner's choices


def test_prune_sensitivity_rows_and_cache_key(tiny_gguf, monkeypatch):
    import harmony_ref.eval.lm_sensitivity as lm_sensitivity_mod
    from harmony_ref.eval.lm_sensitivity import pruned_shapes

    c = tiny_config()
    rows = lm_sensitivity(
        str(tiny_gguf), "fp32", "type", context=32, chunks=1, prune={"ffn": 0.3, "heads": 0.5}
    )
    assert [r["group"] for r in rows] == ["ffn", "heads"]
    fp32 = parse_format("fp32")
    cut, full = pruned_shapes(c, ffn=0.3), pruned_shapes(c)
    assert cut["up_proj"][0] == (64, c.dim)  # 96 * 0.7 -> 64 (multiples of 32)
    ffn = rows[0]
    assert ffn["bytes"] == sum(
        stored_bytes(fp32, cut[t]) for t in ("gate_proj", "up_proj", "down_proj")
    )
    assert ffn["bytes_fp32"] == sum(
        stored_bytes(fp32, full[t]) for t in ("gate_proj", "up_proj", "down_proj")
    )
    assert ffn["prune"]["ffn"] == 0.3 and ffn["prune"]["score"] == "l1"
    assert all(r["kld_mean"] > 0 and r["format"] == "fp32" for r in rows)
    blocks = lm_sensitivity(
        str(tiny_gguf), "fp32", "block", context=32, chunks=1, prune={"ffn": 0.3}
    )
    assert [r["group"] for r in blocks] == ["block 0", "block 1"]
    assert blocks[0]["prune"]["blocks"] == [[0, 0.3, None]]
    # every option is in the cache key: with the measuring gone, the cached call returns and
    # any other score / ratio / format / grouping must measure (and so fail here)
    monkeypatch.setattr(lm_sensitivity_mod, "evaluate_lm", None)
    assert (
        lm_sensitivity(
            str(tiny_gguf), "fp32", "type", context=32, chunks=1, prune={"ffn": 0.3, "heads": 0.5}
        )
        == rows
    )
    for kw in [
        dict(prune={"ffn": 0.3, "heads": 0.5}, prune_score="activation"),
        dict(prune={"ffn": 0.25, "heads": 0.5}),
        dict(prune={"ffn": 0.3}),
    ]:
        with pytest.raises(TypeError):
            lm_sensitivity(str(tiny_gguf), "fp32", "type", context=32, chunks=1, **kw)
    for fmt in ("w8a8-per-channel", "w8a8-per-tensor", "int8"):
        with pytest.raises(TypeError):
            lm_sensitivity(str(tiny_gguf), fmt, "type", context=32, chunks=1)


def test_activation_scored_rows_differ_from_l1(tiny_gguf):
    l1 = lm_sensitivity(str(tiny_gguf), "fp32", "type", context=32, chunks=1, prune={"ffn": 0.3})[0]
    act = lm_sensitivity(
        str(tiny_gguf),
        "fp32",
        "type",
        context=32,
        chunks=1,
        prune={"ffn": 0.3},
        prune_score="activation",
    )[0]
    assert act["prune"]["score"] == "activation" and act["prune"]["samples"] == 10
    assert act["bytes"] == l1["bytes"] and act["kld_mean"] != l1["kld_mean"]


def test_w8a8_sensitivity_rows(tiny_gguf):
    w8 = lm_sensitivity(str(tiny_gguf), "int8", "type", context=32, chunks=1)
    a8 = lm_sensitivity(str(tiny_gguf), "w8a8", "type", context=32, chunks=1)
    assert all(r["format"] == "w8a8-per-channel" for r in a8)
    assert a8[0]["activations"]["granularity"] == "per-channel"
    assert [r["bytes"] for r in a8] == [r["bytes"] for r in w8]  # int8 weights either way
    assert [r["kld_mean"] for r in a8] != [r["kld_mean"] for r in w8]


def test_plan_with_pruning_choices_below_the_unpruned_minimum(tiny_gguf, tmp_path, capsys):
    """A budget below every unpruned choice: the plan must prune; it fits the budget at the
    pruned shapes, its policy carries [prune] and [activations], and the held-out score the
    command reports is what `accuracy` gives the written TOML."""
    from harmony_ref.eval.lm_sensitivity import pruned_shapes

    c = tiny_config()
    g = [parse_format(f) for f in ("fp16", "int8", "int4-g128", "int4-g32")]
    smallest = sum(min(stored_bytes(f, s) for f in g) for s in pruned_shapes(c).values())
    budget = (smallest - 2000) / 1e6
    with pytest.raises(ValueError, match="below the smallest"):
        lm_plan(str(tiny_gguf), budget, context=32, chunks=1)
    plan = lm_plan(
        str(tiny_gguf),
        budget,
        context=32,
        chunks=1,
        prune_ffn=(0, 0.3),
        prune_heads=(0, 0.5),
        activations="per-channel",
    )
    assert plan.prune and plan.linear_bytes <= plan.budget_bytes
    assert plan.policy.prune.ffn == plan.prune.get("ffn", 0.0)
    assert plan.policy.activations.granularity == "per-channel"
    assert plan.predicted_kld == pytest.approx(sum(plan.predicted_parts.values()))
    assert set(plan.predicted_parts) == {"ffn", "attention", "lm_head"}
    out = tmp_path / "plan.toml"
    argv = [
        "plan",
        "--model",
        str(tiny_gguf),
        "--budget-mb",
        f"{budget:.6f}",
        "--context",
        "32",
        "--chunks",
        "1",
        "--prune-ffn",
        "0,0.3",
        "--prune-heads",
        "0,0.5",
        "--activations",
        "per-channel",
        "--out",
        str(out),
        "--json",
    ]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["prune"] == plan.prune and d["formats_per_type"] == plan.choices
    assert d["activations"]["granularity"] == "per-channel" and d["prune_score"] == "l1"
    assert d["prune_ffn_choices"] == [0.0, 0.3] and out.read_text() == d["policy_toml"]
    assert "[prune]" in d["policy_toml"] and "[activations]" in d["policy_toml"]
    assert (
        main(
            [
                "accuracy",
                "--model",
                str(tiny_gguf),
                "--policy",
                str(out),
                "--context",
                "32",
                "--chunks",
                "1",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["rows"][1]["kld_mean"] == d["heldout_kld_mean"]


def test_plan_default_flags_output_has_no_new_fields(tiny_gguf, capsys):
    assert (
        main(
            [
                "plan",
                "--model",
                str(tiny_gguf),
                "--budget-mb",
                "1",
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
    assert sorted(d) == sorted(
        [
            "policy_toml",
            "model",
            "budget_mb",
            "linear_weights_mb",
            "predicted_kld_mean",
            "calibration_scored_tokens",
            "heldout",
            "heldout_kld_mean",
            "heldout_kld_p99",
            "heldout_ppl_ratio",
            "heldout_top1_agreement_pct",
            "formats_per_type",
        ]
    )
    assert "[prune]" not in d["policy_toml"] and "[activations]" not in d["policy_toml"]


@pytest.mark.parametrize(
    "argv,pattern",
    [
        (["sensitivity", "--prune", "ffn=1.5"], "ratio must be in (0, 1)"),
        (["sensitivity", "--prune", "mlp=0.1"], "expected ffn=<ratio>"),
        (["sensitivity", "--prune-score", "activation"], "applies with --prune only"),
        (["sensitivity", "--prune", "ffn=0.1", "--format", "int8"], "drop --format int8"),
        (["sensitivity", "--format", "w8a8-per-row"], "unknown W8A8 variant"),
        (["plan", "--budget-mb", "1", "--prune-ffn", "0,1.2"], "must be in [0, 1)"),
        (["plan", "--budget-mb", "1", "--prune-heads", "x"], "'x' is not a number"),
        (["plan", "--budget-mb", "1", "--prune-score", "activation"], "applies with --prune-ffn"),
    ],
)
def test_bad_compression_input_exit_2(tiny_gguf, capsys, argv, pattern):
    assert main([*argv, "--model", str(tiny_gguf)]) == 2
    err = capsys.readouterr().err.strip()
    assert pattern in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize(
    "argv,pattern",
    [
        (
            ["sensitivity", "--prune", "ffn=0.1"],
            "--prune/--prune-score/--method apply to a decoder",
        ),
        (["sensitivity", "--format", "w8a8"], "W8A8 sensitivity applies to a decoder"),
        (["plan", "--budget-mb", "5", "--prune-ffn", "0,0.1"], "--prune-ffn applies to a decoder"),
        (
            ["plan", "--budget-mb", "5", "--activations", "per-channel"],
            "--activations applies to a decoder",
        ),
    ],
)
def test_minilm_refuses_the_decoder_compression_flags(capsys, argv, pattern):
    assert main([*argv, "--model", "all-minilm-l6"]) == 2
    err = capsys.readouterr().err.strip()
    assert pattern in err and len(err.splitlines()) == 1, err


def test_unscored_tokens_are_the_context_halves_and_the_tail():
    import numpy as np

    ids = np.arange(1100)
    got = lm.unscored_tokens(ids, 512, 2)
    assert list(got) == [*range(0, 257), *range(512, 769), *range(1024, 1100)]
    scored = {c * 512 + j for c in range(2) for j in range(257, 512)}  # targets chunk[first+1:]
    assert not scored & set(got.tolist())


def test_w8a8_and_activation_rows_calibrate_on_tokens_they_never_score(tiny_gguf, monkeypatch):
    """Held out means held out, within sensitivity: the calibration windows come from the
    unscored context halves (and tail) of the rows' own corpus."""
    import numpy as np

    import harmony_ref.compress.pipeline as pipeline
    from harmony_ref.runtime.loader import load_decoder

    seen = []
    real = pipeline.calibration_windows

    def spy(weights, spec, tokens=None, sampling_model=None):
        seen.append(None if tokens is None else np.asarray(tokens).copy())
        return real(weights, spec, tokens, sampling_model)

    monkeypatch.setattr(pipeline, "calibration_windows", spy)
    _, tok = load_decoder(str(tiny_gguf))
    ids = tok.encode(Corpus.shipped("calibration").text)
    lm_sensitivity(str(tiny_gguf), "w8a8", "type", context=32, chunks=2)
    lm_sensitivity(
        str(tiny_gguf),
        "fp32",
        "type",
        context=32,
        chunks=2,
        prune={"ffn": 0.3},
        prune_score="activation",
    )
    want = lm.unscored_tokens(ids, 32, 2)
    assert len(seen) >= 9 and all(s is not None and np.array_equal(s, want) for s in seen)


def test_plan_chooses_k_quants_where_their_blocks_fit(tmp_path):
    """--formats q4_k,q8_0 on a model with 256-wide rows and a 352-wide ffn_down: the planner
    takes q4_k wherever its 256-blocks divide the rows (the budget leaves no room for q8_0
    there) and q8_0 for down_proj, which q4_k cannot store (no row measured for it)."""
    from tests.fixtures.decoder.tiny import write_tiny_gguf

    c = tiny_config("llama", dim=256, n_heads=4, n_kv_heads=2, head_dim=64, ffn_dim=352)
    path = tmp_path / "k.gguf"
    write_tiny_gguf(path, c)
    q4_k, q8_0 = parse_format("q4_k"), parse_format("q8_0")
    types = [g for g, _ in group_patterns(c, "type")]
    down = group_shapes(c, "down_proj", "type")
    assert down[0][1] % 256  # 352: not a 256-multiple
    rows = lm_sensitivity(str(path), "q4_k", context=32, chunks=1)
    assert [r["group"] for r in rows] == [t for t in types if t != "down_proj"]
    smallest = sum(
        stored_bytes(q8_0 if t == "down_proj" else q4_k, group_shapes(c, t, "type")) for t in types
    )
    plan = lm_plan(
        str(path), (smallest + 8000) / 1e6, context=32, chunks=1, formats=("q4_k", "q8_0")
    )
    assert plan.choices == {t: "q8_0" if t == "down_proj" else "q4_k" for t in types}
    assert plan.linear_bytes == smallest
