"""`harmony-ref calibrate --backend host` (calibrate/host.py): real generations measured here,
the harmony-ref-host runtime fitted on the fit runs' per-call profiles, the held-out runs scored.

On a tiny GGUF decoder and a four-run plan (seconds, not the shipped plan's minutes): what is
written and how it loads, that the split holds (no scored run in fitted_on, none of its samples
in the fit), that `predict` and `run --backend simulated` read the two files from anywhere, and
that the flags of the other method are refused. Measured times vary by CPU and load, so no
assertion reads a fitted number: only counts, names and finiteness, which are exact.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math

import pytest

from harmony_ref.calibrate import host_measure
from harmony_ref.calibrate.host import calibrate_host_runs, runtime_path
from harmony_ref.calibrate.host_runs import HostRun, load_host_manifest
from harmony_ref.cli import main

PLAN = (
    HostRun("fit-a", "int4-g32", 16, 3, 64, 1, "fit", profile_contexts=(16, 40)),
    HostRun("fit-b", "int8", 12, 3, 64, 1, "fit", profile_contexts=(12, 40)),
    HostRun("score-t2", "int4-g32", 16, 3, 64, 2, "score", "threads (2)"),
    HostRun("score-p", "int8", 24, 4, 64, 1, "score", "prompt"),
)


@pytest.fixture
def small_machine(monkeypatch):
    """The machine microbenchmarks on small buffers (the 2 GiB DRAM read is for real runs)."""
    monkeypatch.setattr(
        host_measure,
        "machine",
        functools.partial(host_measure.machine, dram_bytes=64 << 20, cache_bytes=4 << 20),
    )


def tiny_plan():
    m = load_host_manifest()
    out = dataclasses.replace(m, run=PLAN)
    object.__setattr__(out, "source", m.source)
    return out


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory, tiny_gguf):
    """One calibration of the tiny decoder, shared by the tests of its outputs."""
    import numba

    if numba.config.NUMBA_NUM_THREADS < 2:  # tests/emulated_cpus.py's 1-thread machines
        pytest.skip("the host method measures at 2 threads; Numba allows 1 here")
    mp = pytest.MonkeyPatch()
    mp.setattr(
        host_measure,
        "machine",
        functools.partial(host_measure.machine, dram_bytes=64 << 20, cache_bytes=4 << 20),
    )
    out = tmp_path_factory.mktemp("cal") / "host.toml"
    steps = []
    try:
        summary = calibrate_host_runs(
            out, model=str(tiny_gguf), repeats=2, progress=steps.append, manifest=tiny_plan()
        )
    finally:
        mp.undo()
    return out, summary, steps


def test_writes_a_soc_profile_naming_its_fitted_runtime(calibrated):
    from harmony_ref.device.runtime import load_profile, load_runtime
    from harmony_ref.device.soc import load_soc

    out, summary, steps = calibrated
    rt_file = runtime_path(out)
    assert rt_file.name == "host.runtime.toml" and rt_file.is_file()
    soc = load_soc(out)
    assert soc.default_runtime == str(rt_file)  # the relative name, read beside the file
    rt = load_runtime(rt_file)
    cal = rt.calibration
    assert [i.rpartition(":")[0] for i in cal.fitted_on] == ["fit-a", "fit-a", "fit-b", "fit-b"]
    assert [i.rpartition(":")[0] for i in cal.scored_on] == [
        "score-t2",
        "score-t2",
        "score-p",
        "score-p",
    ]
    assert math.isfinite(cal.held_out_mape_pct) and cal.held_out_mape_pct >= 0
    assert cal.held_out_mape_pct == pytest.approx(summary["held_out_mape_pct"], rel=1e-5)
    merged = load_profile(out)
    assert merged.calibration.e2e_mape_pct == pytest.approx(cal.held_out_mape_pct, rel=1e-5)
    # progress: the microbenchmarks, each run, each fit run's profile, the fit
    assert len(steps) == 1 + len(PLAN) + 2 + 1


def test_summary_scores_only_the_held_out_runs(calibrated):
    _, s, _ = calibrated
    assert (s["runs_fitted"], s["runs_held_out"]) == (2, 2)
    rows = s["runs"]
    assert len(rows) == 2 * len(PLAN)
    assert {r["run"] for r in rows if r["split"] == "score"} == {"score-t2", "score-p"}
    for key in ("held_out_prefill_mape_pct", "held_out_decode_mape_pct", "fit_mape_pct"):
        assert math.isfinite(s[key]) and s[key] >= 0, key
    for r in rows:
        assert r["measured_ms"] > 0 and r["model_ms"] > 0
        assert r["error_pct"] == pytest.approx(
            100 * (r["model_ms"] - r["measured_ms"]) / r["measured_ms"]
        )
    assert s["machine"]["lscpu_model"] == host_measure.lscpu_model()


def test_predict_and_simulated_run_read_the_files_from_another_folder(
    calibrated, tmp_path, monkeypatch, capsys
):
    out, summary, _ = calibrated
    monkeypatch.chdir(tmp_path)  # the runtime is named relative to host.toml, not to the cwd
    assert main(["predict", "--profile", str(out), "--model", "qwen2.5-0.5b", "--json"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["metrics"]["host_model_mape_pct"]["value"] == pytest.approx(
        summary["held_out_mape_pct"], rel=1e-5
    )


def test_run_reports_the_calibrations_held_out_error_as_its_fidelity(calibrated, capsys):
    """`run --profile host.toml`: the fidelity part's host number is this calibration's held-out
    error (fidelity_profile_mape_pct), not the committed fixtures' (another machine's)."""
    from harmony_ref.job.main import part_names

    out, summary, _ = calibrated
    skip = ",".join(n for n in part_names() if n != "fidelity")
    assert main(["run", "--profile", str(out), "--skip", skip, "--no-record", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["metrics"]["fidelity_profile_mape_pct"]["value"] == pytest.approx(
        summary["held_out_mape_pct"], rel=1e-5
    )
    assert not [n for n in rec["metrics"] if n.startswith("fidelity_host_")]
    assert rec["parts"]["fidelity"]["profile_calibration"] == str(out)


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--threads", "2"], "--threads applies to --method microbench"),
        (["--stat", "median"], "--stat applies to --method microbench"),
        (["--no-e2e"], "--no-e2e applies to --method microbench"),
        (["--method", "microbench", "--model", "smollm2-135m"], "--model applies to"),
        (["--backend", "command", "--method", "microbench"], "--method applies to --backend host"),
    ],
)
def test_flags_of_the_other_method_are_refused_before_any_work(
    tmp_path, capsys, monkeypatch, extra, words
):
    import harmony_ref.calibrate.host as host

    monkeypatch.setattr(host, "calibrate_host_runs", lambda *a, **k: pytest.fail("work started"))
    out = tmp_path / "host.toml"
    assert main(["calibrate", "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1 and len(err) < 200
    assert not list(tmp_path.iterdir())


def test_a_context_beyond_the_checkpoint_is_refused_before_measuring(tmp_path, tiny_gguf):
    from harmony_ref.runtime.loader import checkpoint_spec

    limit = checkpoint_spec(str(tiny_gguf)).max_positions
    plan = tiny_plan()
    long = dataclasses.replace(plan.run[0], context_tokens=limit + 1)
    plan = dataclasses.replace(plan, run=(long,) + plan.run[1:])
    object.__setattr__(plan, "source", load_host_manifest().source)
    with pytest.raises(ValueError, match=f"context of {limit + 1} tokens"):
        calibrate_host_runs(tmp_path / "h.toml", model=str(tiny_gguf), manifest=plan)
    assert not list(tmp_path.iterdir())


def test_one_allowed_thread_is_refused_in_one_line_before_measuring(
    tmp_path, tiny_gguf, monkeypatch
):
    """Where Numba allows one thread (NUMBA_NUM_THREADS=1, a one-core machine) the 2-thread
    measurements cannot run: one line naming why, before any measurement, nothing written (it
    was numba's own 'The number of threads must be between 1 and 1' from the middle of them)."""
    import numba

    monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", 1)
    monkeypatch.setattr(host_measure, "measure_session", lambda *a, **k: pytest.fail("measured"))
    with pytest.raises(ValueError, match="measures at 1 and 2 threads; Numba allows 1 here"):
        calibrate_host_runs(tmp_path / "h.toml", model=str(tiny_gguf), manifest=tiny_plan())
    assert not list(tmp_path.iterdir())


def test_the_shipped_plan_states_its_split_and_quick_subset():
    """The plan users run: three profiled fit runs (one per weight class), and every scored run
    says what it varies; --quick keeps the fit runs and scored runs that vary threads, policy,
    prompt and generation length."""
    m = load_host_manifest()
    fit = [r for r in m.run if r.split == "fit"]
    score = [r for r in m.run if r.split == "score"]
    assert {r.policy for r in fit} == {"int4-g32", "int8", "fp16"}
    assert all(r.profile_contexts and r.quick for r in fit)
    assert all(r.differs_in and not r.profile_contexts for r in score)
    quick = [r for r in score if r.quick]
    assert {r.threads for r in quick} == {1, 2} and len(quick) == 3


def test_the_soc_profiles_cache_reads_fit_in_the_l3_and_a_disturbed_one_is_not_taken():
    """host_runs.l3_read_gbps: the reads of half the L3 where measured (the 64 MiB read is a
    DRAM read on a 32 MiB L3), else the 64 MiB ones; a 2-thread read slower than the 1-thread
    one (the other core was busy) gives way to the 1-thread read, and says so."""
    from harmony_ref.calibrate.host_runs import l3_read_gbps

    old = {"cache_read_gbps_t1": 21.6, "cache_read_gbps_t2": 57.4}
    assert l3_read_gbps(old) == {
        1: (21.6, "measured: 1-thread read of 64 MiB"),
        2: (57.4, "measured: 2-thread read of 64 MiB (in the L3)"),
    }
    new = {**old, "l3_read_gbps_t1": 77.0, "l3_read_gbps_t2": 2.1}
    got = l3_read_gbps(new)
    assert got[1] == (77.0, "measured: 1-thread read of half the L3")
    assert got[2][0] == 77.0 and "2-thread read, 2.1, was disturbed" in got[2][1]
    assert l3_read_gbps({**new, "l3_read_gbps_t2": 120.0})[2][0] == 120.0
