"""pick: feasibility with each constraint named and its numbers, the best by the objective, the
Pareto front, timings of different machines never ranked together, and the Pareto plot."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harmony_ref.sweep.pick import pareto_mask, pick


def frame(rows, **common):
    base = dict(
        profile="phone",
        runtime="llama.cpp-cpu",
        prompt_tokens=512,
        new_tokens=128,
        context_tokens=2048,
        batch=1,
        backend="simulated",
        kv_dtype="fp16",
        fits_memory=1.0,
        app_budget_mb=4000.0,
        machine="m1",
        measured_metrics="",
        status="ok",
    )
    return pd.DataFrame([{**base, **common, **r} for r in rows])


ROWS = [  # (model, policy): decode tokens/s, accuracy drop, peak memory
    dict(
        model="big",
        policy="fp16",
        decode_tokens_per_s=5.0,
        accuracy_drop_pct=0.0,
        peak_memory_mb=6000.0,
        fits_memory=0.0,
    ),
    dict(
        model="big",
        policy="int4",
        decode_tokens_per_s=18.0,
        accuracy_drop_pct=3.0,
        peak_memory_mb=2000.0,
    ),
    dict(
        model="small",
        policy="int8",
        decode_tokens_per_s=25.0,
        accuracy_drop_pct=0.5,
        peak_memory_mb=900.0,
    ),
    dict(
        model="small",
        policy="int4",
        decode_tokens_per_s=40.0,
        accuracy_drop_pct=3.0,
        peak_memory_mb=600.0,
    ),
]


def test_the_best_feasible_and_why_each_other_loses():
    [a] = pick(frame(ROWS), max_accuracy_drop=1.0, min_decode_tps=10)
    f = a.frame.set_index(["model", "policy"])
    assert (a.best["model"], a.best["policy"]) == ("small", "int8")
    assert f.loc[("big", "fp16"), "verdict"] == "infeasible"
    why = f.loc[("big", "fp16"), "why"]
    assert "peak memory 6000 MB > the phone's app budget 4000 MB" in why
    assert "decode 5 tokens/s < 10" in why
    assert f.loc[("small", "int4"), "why"] == "on llama.cpp-cpu: recall@1 drop 3 points > 1"
    assert a.loss_metric == "accuracy_drop_pct"


def test_budget_objective_and_pareto():
    [a] = pick(frame(ROWS), budget_mb=1000)
    f = a.frame.set_index(["model", "policy"])
    assert (a.best["model"], a.best["policy"]) == ("small", "int4")  # fastest within 1000 MB
    assert f.loc[("big", "int4"), "why"] == "on llama.cpp-cpu: peak memory 2000 MB > budget 1000 MB"
    assert f.loc[("small", "int8"), "pareto"]  # slower but more accurate: on the front
    assert "feasible, decode 25 vs 40 tokens/s" in f.loc[("small", "int8"), "why"]
    [acc] = pick(frame(ROWS), budget_mb=1000, objective="accuracy")
    assert acc.best["policy"] == "int8"
    [mem] = pick(frame(ROWS), objective="memory")
    assert (mem.best["model"], mem.best["policy"]) == ("small", "int4")


def test_nothing_feasible_and_bad_constraints():
    [a] = pick(frame(ROWS), min_decode_tps=100)
    assert a.best is None and set(a.frame["verdict"]) == {"infeasible"}
    with pytest.raises(ValueError, match="--max-kld 0.1: the sweep has no KL divergence metric"):
        pick(frame(ROWS), max_kld=0.1)
    with pytest.raises(ValueError, match="--profile 'moon': not in the sweep"):
        pick(frame(ROWS), profiles=["moon"])
    with pytest.raises(ValueError, match="--budget-mb nan"):
        pick(frame(ROWS), budget_mb=math.nan)
    no_acc = frame([{k: v for k, v in r.items() if k != "accuracy_drop_pct"} for r in ROWS])
    with pytest.raises(ValueError, match="--max-accuracy-drop: the sweep has no"):
        pick(no_acc, max_accuracy_drop=1)


def test_a_kld_metric_is_preferred_as_the_accuracy_loss():
    rows = [{**r, "lm_kld_mean": r["accuracy_drop_pct"] / 10} for r in ROWS]
    [a] = pick(frame(rows), max_kld=0.1)
    assert a.loss_metric == "lm_kld_mean" and a.best["policy"] == "int8"


def test_timings_of_two_machines_are_never_ranked_together():
    rows = [
        {**r, "machine": "m1" if i % 2 else "m2", "measured_metrics": "decode_tokens_per_s"}
        for i, r in enumerate(ROWS)
    ]
    with pytest.raises(ValueError, match=r"measured on 2 machines \['m1', 'm2'\]"):
        pick(frame(rows))
    [a] = pick(frame(rows), machine="m1")
    assert set(a.frame["model"] + a.frame["policy"]) == {"bigint4", "smallint4"}
    with pytest.raises(ValueError, match="--machine 'm3'"):
        pick(frame(rows), machine="m3")


def test_one_answer_per_phone_and_scenario():
    df = pd.concat([frame(ROWS), frame(ROWS, profile="other"), frame(ROWS, prompt_tokens=128)])
    answers = pick(df)
    assert [(a.profile, a.scenario["prompt_tokens"]) for a in answers] == [
        ("other", 512),
        ("phone", 128),
        ("phone", 512),
    ]


def test_pareto_mask():
    assert pareto_mask([1, 2, 3, 2], [0, 1, 2, 2]) == [True, True, True, False]
    assert pareto_mask([1, 1], [0, 0]) == [True, True]  # ties beat no one


def test_pareto_plot_is_a_readable_png(tmp_path):
    import matplotlib.image as mpimg

    from harmony_ref.sweep.pareto import pareto_plot

    [a] = pick(frame(ROWS), max_accuracy_drop=1.0)
    path = pareto_plot(a, tmp_path / "p.png")
    img = mpimg.imread(path)
    assert img.shape[1] == 1400 and img.shape[0] >= 700


def test_pareto_figure_has_no_layout_problems(tmp_path):
    """The house checks of tests/track/test_plots.py: no warnings, nothing past the edge, the
    legend clear of the data, no label across a frame or over another."""
    import warnings

    from harmony_ref.sweep.pareto import pareto_figure
    from harmony_ref.track import plot_style

    [a] = pick(frame(ROWS), max_accuracy_drop=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = pareto_figure(a)
        assert plot_style.layout_problems(fig) == []
        plot_style.save_png(fig, tmp_path / "p.png")


def test_one_answer_per_phone_and_runtime_each_naming_its_runtime():
    """Two phones x two runtimes: four answers; each winner's line and every loser's reason
    say which runtime, and the winner differs by runtime where the numbers do."""
    from harmony_ref.sweep.pick import answer_line

    rows = []
    for phone in ("sd8g3", "d9300"):
        for runtime, speed in (("llama.cpp-cpu", 1.0), ("executorch-xnnpack", 1.5)):
            for r in ROWS:
                rows.append(
                    {
                        **r,
                        "profile": phone,
                        "runtime": runtime,
                        "decode_tokens_per_s": r["decode_tokens_per_s"] * speed,
                    }
                )
    df = frame(rows)
    answers = pick(df, min_decode_tps=20)
    assert [(a.profile, a.runtime) for a in answers] == [
        ("d9300", "executorch-xnnpack"),
        ("d9300", "llama.cpp-cpu"),
        ("sd8g3", "executorch-xnnpack"),
        ("sd8g3", "llama.cpp-cpu"),
    ]
    for a in answers:
        assert answer_line(a).startswith(f"{a.profile} on {a.runtime} (512 prompt")
        assert (a.frame["runtime"] == a.runtime).all()
        assert a.frame["why"].str.startswith(f"on {a.runtime}: ").all()
        assert a.to_dict()["runtime"] == a.runtime
    # 18 tokens/s on llama.cpp fails the floor; x1.5 on XNNPACK (27) passes it
    cpu = answers[1].frame.set_index(["model", "policy"])
    xnn = answers[0].frame.set_index(["model", "policy"])
    assert cpu.loc[("big", "int4"), "verdict"] == "infeasible"
    assert xnn.loc[("big", "int4"), "verdict"] != "infeasible"
    assert [a.runtime for a in pick(df, runtimes=["llama.cpp-cpu"])] == ["llama.cpp-cpu"] * 2
    with pytest.raises(ValueError, match="--runtime 'qnn-npu': not in the sweep; its runtimes"):
        pick(df, runtimes=["qnn-npu"])


def test_a_sweep_without_the_runtime_column_reads_as_each_profiles_own():
    df = frame(ROWS).drop(columns=["runtime"])
    (a,) = pick(df)
    assert a.runtime == "" and a.frame["why"].str.startswith("on the profile's own runtime").all()
