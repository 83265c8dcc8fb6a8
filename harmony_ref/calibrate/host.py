"""`harmony-ref calibrate --backend host`: this machine calibrated the way the host fidelity set
is, on real generations measured here, and scored on runs it never fitted.

    summary = calibrate_host_runs("host.toml", quick=True, progress=print)

Steps: the run plan and its split come from harmony_ref/data/fidelity/host.toml (fixed before any
measurement; `--quick` keeps the runs marked `quick`); calibrate/host_measure.py measures this
machine's microbenchmarks, every run end to end and the fit runs' per-call profiles;
calibrate/host_runs.py writes this machine's SoC profile from the microbenchmarks and fits the
`harmony-ref-host` runtime profile on the fit runs' profiles alone (NNLS per call class, refined
on the profiled forwards); the runs marked `score` (other policies, prompts, contexts, thread
counts) are then predicted and their error reported per metric. Two files are written, each
atomically and read back through the schema: `host.toml` (the SoC profile, naming its runtime)
and `host.runtime.toml` (the fitted runtime, whose [calibration] carries the held-out error), so
`run --backend simulated --profile host.toml` predicts this machine.

    soc_text, machine = host_soc_profile("host", "llama.cpp-host")   # no runs: the SoC alone

The SoC profile alone (microbenchmarks only) is what `calibrate --backend command` fits another
runtime (llama.cpp) on when it runs on this host.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from pathlib import Path

from harmony_ref._io import StagedOutputs, check_output_file
from harmony_ref.calibrate.host_runs import HOST_METRICS, host_soc_toml, load_host_manifest

QUICK_REPEATS = 3  # whole-run and profile repeats of --quick (the full plan takes 5)


def runtime_path(out) -> Path:
    """Where the fitted runtime profile goes: beside the SoC profile, `<stem>.runtime.toml`."""
    out = Path(out)
    return out.with_name(out.stem + ".runtime.toml")


def cpu_label(machine: dict) -> str:
    """'AMD EPYC (family 25 model 17), 2 cores, L3 32768K' from the machine facts of a session
    measured here (its cpu_id is backends/host_timing.py's, the fidelity fixtures' naming)."""
    import os

    return f"{machine['cpu_id']}, {os.cpu_count()} cores, L3 {machine['l3']}"


def plan_runs(manifest, quick: bool) -> tuple:
    """The runs a calibration measures: every run of the plan, or the ones marked `quick`."""
    return tuple(r for r in manifest.run if r.quick or not quick)


def _check_plan(model: str, runs) -> None:
    """The checkpoint must hold every run's context (before any measurement)."""
    from harmony_ref.calibrate.points import checkpoint_spec

    limit = checkpoint_spec(model).max_positions
    for r in runs:
        if r.context_tokens > limit:
            raise ValueError(
                f"--model {model}: run {r.id} needs a context of {r.context_tokens} tokens, "
                f"the checkpoint holds {limit}"
            )


HOST_THREADS = 2  # the host profile's machine: reads, launches and fits at 1 and 2 threads


def _check_two_threads() -> None:
    """The host method measures at 1 and HOST_THREADS threads (reads, parallel launches, the
    runs' thread shares): with fewer threads allowed, one line before any work."""
    import numba

    allowed = numba.config.NUMBA_NUM_THREADS
    if allowed < HOST_THREADS:
        raise ValueError(
            f"--method host measures at 1 and {HOST_THREADS} threads; Numba allows {allowed} here "
            "(NUMBA_NUM_THREADS, or the machine's cores): run it where 2 threads are allowed"
        )


def calibrate_host_runs(
    out,
    name: str = "host",
    model: str = "",
    quick: bool = False,
    repeats: int | None = None,
    progress=None,
    manifest=None,
) -> dict:
    """Measure, fit, score and write (the module docstring). `manifest`: the run plan (default
    the shipped one; tests pass a smaller one). Returns the summary the command prints."""
    from harmony_ref.calibrate.fit_runtime import runtime_toml, with_held_out
    from harmony_ref.calibrate.host_measure import measure_session
    from harmony_ref.calibrate.host_runs import fit_host_runtime, host_points
    from harmony_ref.device.runtime import load_profile, load_runtime
    from harmony_ref.device.soc import load_soc
    from harmony_ref.metrics import mape_pct

    out = check_output_file(out, "--out")
    rt_out = check_output_file(runtime_path(out), "--out's runtime profile")
    manifest = manifest or load_host_manifest()
    model = model or manifest.model
    runs = plan_runs(manifest, quick)
    if not any(r.split == "fit" and r.profile_contexts for r in runs):
        raise ValueError(f"{manifest.source}: no fit run with profile_contexts: nothing to fit")
    _check_plan(model, runs)
    _check_two_threads()
    reps = repeats or (QUICK_REPEATS if quick else 5)
    session = measure_session(runs, model, reps, QUICK_REPEATS if quick else 5, progress=progress)
    cpu = cpu_label(session["machine"])
    with tempfile.TemporaryDirectory() as tmp:
        soc_tmp = Path(tmp) / "soc.toml"
        here = dataclasses.replace(
            manifest,
            profile=str(soc_tmp),
            run=runs,
            cpu=cpu,
            model=model,
            sessions=(),
            session_data=(session,),
        )
        object.__setattr__(here, "source", manifest.source)
        soc_tmp.write_text(host_soc_toml(here, name=name))
        if progress:
            progress("fitting the runtime on the fit runs' per-call profiles")
        rt, info = fit_host_runtime(here)
        rows = [
            {
                "run": p.id.rpartition(":")[0],
                "split": p.split,
                "metric": p.metric,
                "measured_ms": p.measured,
                "model_ms": (v := p.predicted(rt)),
                "differs_in": p.note,
                "error_pct": 100 * (v - p.measured) / p.measured,
            }
            for p in host_points(here)
        ]
    rt = dataclasses.replace(
        rt, description=f"harmony-ref's runtime/llama.py on {cpu}, fitted here"
    )

    def mape(split, metric=None):
        pairs = [
            (r["model_ms"], r["measured_ms"])
            for r in rows
            if r["split"] == split and (metric is None or r["metric"] == metric)
        ]
        return mape_pct(pairs) if pairs else None

    held = mape("score")  # every scored run, priced once above
    rt = with_held_out(rt, math.nan if held is None else held)
    fitted = set(info["refined"]) | {"forward_us"}
    comments = {f"efficiency.{k}": "fitted on this machine's fit runs" for k in info["refined"]}
    comments["overhead.launch_us"] = "fitted on this machine's fit runs"
    comments["overhead.forward_us"] = "measured: decode step minus its profiled forward"
    comments["efficiency.matmul"] = "= int4 (the class every unset one falls back to)"
    comments["efficiency.memory"] = "= cache (the bandwidth the fit found the weights read at)"
    comments["overhead.fp16_widen_ns_per_weight"] = "measured: NumPy's float16 -> float32 cast"
    header = (
        f"{rt.description}\nWritten by `harmony-ref calibrate --backend host` "
        f"({'--quick, ' if quick else ''}{len(runs)} runs of {model}): fitted numbers come from "
        "the runs [calibration] names;\nthe rest are the shipped harmony-ref-host prior."
    )
    soc_text = host_soc_toml(
        here,
        name=name,
        default_runtime=rt_out.name,
        written_by="microbenchmarks of `harmony-ref calibrate --backend host` on this machine",
    )
    with StagedOutputs() as staged:  # both files or neither, each read back first
        load_runtime(staged.stage_text(rt_out, runtime_toml(rt, comments, header)))
        load_soc(staged.stage_text(out, soc_text))
        staged.commit()
    load_profile(out)  # the SoC profile with its runtime, through the real schema
    return {
        "profile": str(out),
        "runtime": str(rt_out),
        "backend": "host",
        "method": "runs",
        "model": model,
        "cpu": cpu,
        "quick": quick,
        "repeats": reps,
        "runs_fitted": sum(r.split == "fit" for r in runs),
        "runs_held_out": sum(r.split == "score" for r in runs),
        "fitted": sorted(fitted),
        "fit_mape_pct": mape("fit"),
        "held_out_prefill_mape_pct": mape("score", HOST_METRICS[0]),
        "held_out_decode_mape_pct": mape("score", HOST_METRICS[1]),
        "held_out_mape_pct": held,
        "host_model_mape_pct": held,
        "seconds": session["seconds"],
        "machine": {k: v for k, v in session["machine"].items() if k != "flags"},
        "runs": rows,
    }


def host_soc_profile(name: str, runtime: str, written_by: str) -> tuple[str, dict]:
    """(the TOML of this machine's SoC profile naming `runtime`, the machine facts): the
    microbenchmarks alone, no runs (about 20 s)."""
    from harmony_ref.calibrate.host_measure import machine

    facts = machine()
    manifest = load_host_manifest()
    here = dataclasses.replace(
        manifest,
        profile=name,
        cpu=cpu_label(facts),
        sessions=(),
        session_data=({"machine": facts},),
    )
    return host_soc_toml(here, name=name, default_runtime=runtime, written_by=written_by), facts


def on_measured_host_soc(out, name: str, written_by: str, fit):
    """`fit(soc_path, soc_label)` on this machine's SoC profile (host_soc_profile, naming the
    runtime `fit` writes to `out` as its own), staged in a temporary file; the profile is written beside `out` as
    OUT.soc.toml (checked before any work) only once `fit` returned: (fit's result, that path)."""
    from harmony_ref._io import write_checked
    from harmony_ref.device.soc import load_soc

    out = Path(out)
    soc_out = check_output_file(out.with_name(out.stem + ".soc.toml"), "--out's SoC profile")
    text, _ = host_soc_profile(name, out.name, written_by)
    with tempfile.TemporaryDirectory() as tmp:
        soc_tmp = Path(tmp) / soc_out.name
        soc_tmp.write_text(text)
        result = fit(str(soc_tmp), soc_out.name)
    write_checked(soc_out, text, load_soc)
    return result, soc_out
