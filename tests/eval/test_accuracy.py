"""Accuracy metrics, the evaluation set, per-layer sensitivity and the planner, on hand-made
embeddings and a tiny random checkpoint (no downloads); the CLI commands on the tiny model."""

import itertools
import json
import os
from pathlib import Path

import numpy as np
import pytest

import harmony_ref.eval.plan as planner
import harmony_ref.runtime.minilm as minilm
from harmony_ref.cli import main
from harmony_ref.eval.embedding import EvalSet, compare, evaluate, load_pairs
from harmony_ref.eval.plan import choose_formats, plan_policy
from harmony_ref.eval.sensitivity import layer_losses, sensitivity
from harmony_ref.quant.policy import Policy, load_policy, parse_format

SMALL_PAIRS = 24  # pairs of the shipped set used on the tiny model (keeps the tests fast)


@pytest.fixture(scope="module")
def small_set():
    full = load_pairs()
    n = len(full.sentences) // 2
    idx = list(range(SMALL_PAIRS)) + list(range(n, n + SMALL_PAIRS))
    partner = np.concatenate([np.arange(SMALL_PAIRS, 2 * SMALL_PAIRS), np.arange(SMALL_PAIRS)])
    return EvalSet(
        [full.sentences[i] for i in idx], partner, [full.categories[i] for i in idx], "small"
    )


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HARMONY_REF_CACHE", str(tmp_path / "cache"))


def test_shipped_evaluation_set():
    es = load_pairs()
    n = len(es.sentences) // 2
    assert n >= 150 and len(set(es.sentences)) == 2 * n >= 300
    assert {"everyday", "technical", "question", "negation", "numbers"} <= set(es.categories)
    assert all(es.partner[es.partner[i]] == i != es.partner[i] for i in range(2 * n))


@pytest.mark.parametrize(
    "text, msg",
    [
        ("category\tgroup\tsentence_a\n", "header must be"),
        (
            "category\tgroup\tsentence_a\tsentence_b\nx\tg\ta\t\nx\tg\tc\td\n",
            "line 2: field 'sentence_b' is empty",
        ),
        ("category\tgroup\tsentence_a\tsentence_b\nx\tg\ta\tb\nx\tg\ta\td\n", "appears twice"),
        ("category\tgroup\tsentence_a\tsentence_b\nx\tg\ta\tb\n", "at least 2 pairs"),
    ],
)
def test_bad_pairs_file(tmp_path, text, msg):
    p = tmp_path / "pairs.tsv"
    p.write_text(text)
    with pytest.raises(ValueError, match=msg) as e:
        load_pairs(p)
    assert str(p) in str(e.value)


def test_compare_by_hand():
    # Four unit vectors: 0<->1 and 2<->3 are pairs. In `ref` both pairs are nearest neighbours;
    # in `emb` sentence 2 moves next to 0, so 0's and 2's neighbours change.
    ref = np.array([[1, 0, 0], [0.9, 0.1, 0], [0, 1, 0], [0, 0.9, 0.1]], dtype=np.float32)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    emb = ref.copy()
    emb[2] = np.array([0.99, 0.0, 0.01]) / np.linalg.norm([0.99, 0.0, 0.01])
    partner = np.array([1, 0, 3, 2])
    m = compare(ref, emb, partner)
    assert m.value("recall_at_1_fp32") == 100.0
    # emb neighbours: 0->2, 1->0 (ok), 2->0, 3->1 (ok? 3 is [0,.9,.1]: closest is 1)
    assert m.value("recall_at_1") == 25.0
    assert m.value("accuracy_drop_pct") == 75.0
    assert m.value("top1_agreement_pct") == 25.0
    assert m.value("cosine_min") == pytest.approx(float(ref[2] @ emb[2]))
    assert (
        m["accuracy_drop_pct"].kind == "numerical" and m["accuracy_drop_pct"].unit == "pct_points"
    )


def test_evaluate_fp32_is_lossless(tiny, small_set):
    m = evaluate("fp32", model=tiny, evalset=small_set)
    assert m.value("accuracy_drop_pct") == 0 and m.value("cosine_min") == pytest.approx(1.0)
    assert m.value("top1_agreement_pct") == 100.0
    m4 = evaluate("int4-g128", model=tiny, evalset=small_set)
    assert m4.value("linear_weights_mb") < m.value("linear_weights_mb") / 6
    assert m4.value("cosine_mean") < 1.0


def test_layer_losses_start_at_the_layer_and_equal_a_full_forward(tiny, small_set):
    rows = layer_losses("int4-g32", model=tiny, evalset=small_set)
    assert [r["layer"] for r in rows] == tiny.linear_names()
    for r in (rows[1], rows[-1]):
        alone = Policy(
            "alone", parse_format("fp32"), layers=((r["layer"], parse_format("int4-g32")),)
        )
        m = evaluate(alone, model=tiny, evalset=small_set)
        assert r["cosine_loss"] == pytest.approx(1 - m.value("cosine_mean"), abs=1e-7)
        assert r["accuracy_drop_pct"] == m.value("accuracy_drop_pct")
    assert all(r["cosine_loss"] > 0 and r["bytes"] < r["bytes_fp32"] for r in rows)
    df = sensitivity("int4-g32", model=tiny, evalset=small_set)
    assert list(df["cosine_loss"]) == sorted(df["cosine_loss"], reverse=True)
    # cached on disk: a second call returns the same rows without recomputing
    assert layer_losses("int4-g32", model=tiny, evalset=small_set) == rows
    (cached,) = (Path(os.environ["HARMONY_REF_CACHE"]) / "layer-losses").glob("int4-g32-*.json")
    cached.write_text('{"rows": [')  # damaged: measured again, not a crash
    assert layer_losses("int4-g32", model=tiny, evalset=small_set) == rows
    assert json.loads(cached.read_text())["rows"] == rows


def test_choose_formats_is_optimal_against_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(30):
        cost = rng.integers(1, 20, size=(4, 3))
        loss = rng.random((4, 3))
        cap = int(rng.integers(cost.min(axis=1).sum(), cost.max(axis=1).sum() + 1))
        picks = choose_formats(cost, loss, cap)
        assert sum(cost[i, f] for i, f in enumerate(picks)) <= cap
        best = min(
            sum(loss[i, f] for i, f in enumerate(c))
            for c in itertools.product(range(3), repeat=4)
            if sum(cost[i, f] for i, f in enumerate(c)) <= cap
        )
        assert sum(loss[i, f] for i, f in enumerate(picks)) == pytest.approx(best)
    with pytest.raises(ValueError, match="no choice fits"):
        choose_formats(np.array([[5, 6]]), np.array([[0.0, 0.0]]), 4)


def test_plan_fits_budget_and_is_a_loadable_policy(tiny, small_set, tmp_path):
    int4 = tiny.linear_nbytes("int4-g128") / 1e6
    fp16 = tiny.linear_nbytes("fp16") / 1e6
    losses = []
    for budget in (int4 * 1.05, (int4 + fp16) / 2, fp16 * 1.01):
        plan = plan_policy(budget, model=tiny, evalset=small_set)
        path = tmp_path / "plan.toml"
        path.write_text(plan.policy.to_toml())
        policy = load_policy(str(path))
        assert tiny.linear_nbytes(str(path)) == plan.linear_bytes <= budget * 1e6
        assert {n: policy.format_for(n).name for n in tiny.linear_names()} == plan.choices
        losses.append(1 - evaluate(str(path), model=tiny, evalset=small_set).value("cosine_mean"))
    assert losses[0] > losses[1] > losses[2]  # more budget, less loss
    assert set(plan.choices.values()) == {"fp16"}  # the largest budget buys FP16 everywhere
    with pytest.raises(ValueError, match="below the smallest possible"):
        plan_policy(int4 * 0.9, model=tiny, evalset=small_set)


def test_impossible_budget_is_refused_before_measuring(tiny, small_set, monkeypatch):
    """On the real model the sensitivity runs take minutes: an impossible budget must not wait."""

    def no_measuring(*a, **k):
        raise AssertionError("measured layer losses for a budget that cannot fit")

    monkeypatch.setattr(planner, "layer_losses", no_measuring)
    int4 = tiny.linear_nbytes("int4-g128") / 1e6
    with pytest.raises(ValueError, match=r"below the smallest possible Linear weights \(0\.\d+ MB"):
        plan_policy(int4 * 0.99, model=tiny, evalset=small_set)


@pytest.fixture
def cli_tiny(tiny, monkeypatch):
    """Commands that load the real model get the tiny one."""
    monkeypatch.setattr(minilm, "real_model", lambda *a, **k: tiny)
    return tiny


def test_cli_accuracy_sensitivity_plan_export(cli_tiny, small_set, tmp_path, capsys):
    pairs = tmp_path / "pairs.tsv"
    n = len(small_set.sentences) // 2
    pairs.write_text(
        "category\tgroup\tsentence_a\tsentence_b\n"
        + "".join(
            f"c\tg\t{small_set.sentences[i]}\t{small_set.sentences[n + i]}\n" for i in range(n)
        )
    )
    assert (
        main(
            [
                "accuracy",
                "--model",
                "all-minilm-l6",
                "--policy",
                "int8",
                "--policy",
                "minilm-mixed",
                "--json",
                "--pairs",
                str(pairs),
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["sentences"] == 2 * SMALL_PAIRS
    assert out["policies"]["int8"]["accuracy_drop_pct"]["unit"] == "pct_points"

    assert (
        main(
            [
                "sensitivity",
                "--model",
                "all-minilm-l6",
                "--format",
                "int4-g128",
                "--top",
                "3",
                "--json",
                "--pairs",
                str(pairs),
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert len(out["layers"]) == 3 and out["format"] == "int4-g128"

    budget = cli_tiny.linear_nbytes("int8") / 1e6
    toml = tmp_path / "p.toml"
    assert (
        main(
            [
                "plan",
                "--model",
                "all-minilm-l6",
                "--budget-mb",
                f"{budget:.4f}",
                "--out",
                str(toml),
                "--pairs",
                str(pairs),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "[layers]" in text and "accuracy_drop_pct" in text
    assert (
        main(["accuracy", "--model", "all-minilm-l6", "--policy", str(toml), "--pairs", str(pairs)])
        == 0
    )
    capsys.readouterr()

    art = tmp_path / "a.safetensors"
    assert main(["export", "--policy", str(toml), str(art), "--json"]) == 0
    capsys.readouterr()
    assert (
        main(
            [
                "accuracy",
                "--model",
                "all-minilm-l6",
                "--artifact",
                str(art),
                "--policy",
                str(toml),
                "--json",
                "--pairs",
                str(pairs),
            ]
        )
        == 0
    )
    res = json.loads(capsys.readouterr().out)["policies"]
    assert res[str(art)]["cosine_mean"] == res[str(toml)]["cosine_mean"]  # bit-identical path
    assert (
        main(["plan", "--model", "all-minilm-l6", "--budget-mb", "0.001", "--pairs", str(pairs)])
        == 2
    )
    assert main(["sensitivity", "--format", "int3"]) == 2
    assert main(["plan", "--budget-mb", "-1"]) == 2
    # output directories are made when missing (one way in every command); a file in the way
    # of one is bad input, found before any work
    (tmp_path / "a-file").write_text("x")
    not_a_dir = tmp_path / "a-file" / "sub"
    assert main(["export", "--policy", "int8", str(not_a_dir / "a.safetensors")]) == 2
    assert main(["plan", "--budget-mb", "8", "--out", str(not_a_dir / "p.toml")]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err
    assert main(["accuracy", "--model", "all-minilm-l6", "--policy", "no-such-policy"]) == 2
    assert "no-such-policy" in capsys.readouterr().err


def test_accuracy_benchmarks_are_well_formed():
    import inspect

    import bench.bench_accuracy as ba

    for cls in (ba.AccuracyTrack, ba.EncodeTime):
        assert len(cls.params) == len(cls.param_names), cls.__name__
    for name, fn in inspect.getmembers(ba.AccuracyTrack, inspect.isfunction):
        if name.startswith("track_"):
            assert getattr(fn, "unit", None), f"{name} has no unit"
    assert "minilm-mixed" in ba.POLICIES


def test_cli_accuracy_scores_a_pruned_minilm(cli_tiny, small_set, tmp_path, capsys):
    """A policy with a [prune] table scores through the same `accuracy` path: smaller Linear
    weights (the pruned shapes, not masked zeros) and embeddings that differ from FP32's."""
    pairs = tmp_path / "pairs.tsv"
    n = len(small_set.sentences) // 2
    pairs.write_text(
        "category\tgroup\tsentence_a\tsentence_b\n"
        + "".join(
            f"c\tg\t{small_set.sentences[i]}\t{small_set.sentences[n + i]}\n" for i in range(n)
        )
    )
    pruned = tmp_path / "pruned.toml"
    pruned.write_text('name = "pruned"\ndefault = "int8"\n[prune]\nffn = 0.5\nheads = 0.5\n')
    assert (
        main(
            [
                "accuracy",
                "--model",
                "all-minilm-l6",
                "--policy",
                "int8",
                "--policy",
                str(pruned),
                "--json",
                "--pairs",
                str(pairs),
            ]
        )
        == 0
    )
    res = json.loads(capsys.readouterr().out)["policies"]
    full, cut = res["int8"], res[str(pruned)]
    assert cut["linear_weights_mb"]["value"] < 0.8 * full["linear_weights_mb"]["value"]
    assert cut["cosine_mean"]["value"] < full["cosine_mean"]["value"]
    assert cut["weights_mb"]["value"] < full["weights_mb"]["value"]


def _pairs_file(path, evalset, n_pairs):
    n = len(evalset.sentences) // 2
    path.write_text(
        "category\tgroup\tsentence_a\tsentence_b\n"
        + "".join(
            f"c\tg\t{evalset.sentences[i]}\t{evalset.sentences[n + i]}\n" for i in range(n_pairs)
        )
    )
    return path


def test_the_minilm_plan_is_scored_on_pairs_it_was_not_planned_on(
    cli_tiny, small_set, tmp_path, capsys, monkeypatch
):
    """Held out means held out: the per-layer losses the knapsack reads are measured on the
    calibration pairs only, the planned policy scored on the other pairs only (every third),
    and the output says which split did what. It once planned and scored on every pair."""
    from harmony_ref.eval import embedding

    planned, scored = [], []
    real_losses, real_evaluate = planner.layer_losses, embedding.evaluate
    monkeypatch.setattr(
        planner,
        "layer_losses",
        lambda f, model, evalset, progress: (
            planned.append(set(evalset.sentences)) or real_losses(f, model, evalset, progress)
        ),
    )
    monkeypatch.setattr(
        embedding,
        "evaluate",
        lambda *a, evalset, **k: (
            scored.append(set(evalset.sentences)) or real_evaluate(*a, evalset=evalset, **k)
        ),
    )
    pairs = _pairs_file(tmp_path / "pairs.tsv", small_set, SMALL_PAIRS)
    budget = cli_tiny.linear_nbytes("int8") / 1e6
    argv = ["plan", "--model", "all-minilm-l6", "--budget-mb", f"{budget:.4f}"]
    assert main([*argv, "--pairs", str(pairs), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert planned and scored
    assert not set.union(*planned) & set.union(*scored)
    assert len(set.union(*scored)) == 2 * (SMALL_PAIRS // 3)
    assert "calibration: 16 pairs" in out["planned_on"]
    assert "held-out: 8 pairs" in out["scored_on"]
    assert main([*argv, "--pairs", str(pairs)]) == 0
    assert "scored on" in capsys.readouterr().out


def test_the_minilm_plan_refuses_pairs_too_few_to_hold_some_out(
    cli_tiny, small_set, tmp_path, capsys
):
    pairs = _pairs_file(tmp_path / "pairs.tsv", small_set, 5)
    argv = ["plan", "--model", "all-minilm-l6", "--budget-mb", "8", "--pairs", str(pairs)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "5 pairs are too few to plan on some and score the plan on others" in err
    assert len(err.splitlines()) == 1
