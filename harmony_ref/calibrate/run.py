"""The whole calibration, step by step: what `harmony-ref calibrate` runs.

    result, summary = calibrate_host("host.toml", quick=True)                 # this CPU
    result, summary = calibrate_op_file("ops.csv", "phone.toml", name="phone")  # device op times
    table, summary = calibrate_phases(command, "llama-bench", workloads, "harmony-flagship",
                                      600.0, "phone.toml", "phone")         # a phone's phase times

Host: Numba and OpenBLAS threads pinned, a load canary's baseline taken, the streaming-read
bandwidth measured, the microbenchmarks run (calibrate/microbench.py), the roofline fitted on the
fitted set and scored on the held-out one (calibrate/fit.py, error.py), the profile written and
read back through the schema, the held-out whole-model runs measured by HostDevice and predicted
by SimulatedDevice on it, and the profile written again with its [calibration] section.
Op file: the same fit on op times a device profiler exported (no whole-model runs).
Phases: a benchmark command run once per workload, a base profile's efficiencies and launch
overhead fitted to the prefill and decode-step times, scored on every third workload.
Every profile is written atomically and must load back through device/soc.py.
`summary` is the plain-number report the command prints (and prints as JSON).
"""

from __future__ import annotations

from harmony_ref._io import StagedOutputs, write_checked
from harmony_ref.calibrate.error import (
    FIT_WORKLOADS,
    HELDOUT_WORKLOADS,
    QUICK_FIT_WORKLOADS,
    QUICK_WORKLOADS,
    Calibration,
    calibrate_ops,
    heldout_e2e,
    workload_config,
)
from harmony_ref.calibrate.fit import (
    PHASE_METRICS,
    PhaseFit,
    fit,
    fit_phase_efficiencies,
    load_op_times,
    phase_terms,
    seed_rates,
)
from harmony_ref.calibrate.write import (
    calibration_toml,
    nominal_host_peaks,
    profile_with_efficiencies,
)
from harmony_ref.device.runtime import load_profile
from harmony_ref.metrics import ape_pct, mape_pct
from harmony_ref.units import GB, GIGA, MS_PER_S, US_PER_S


def _write_profile(result: Calibration, out, heldout=None) -> None:
    """Write the fitted profile, read it back through the schema, score the held-out whole-model
    runs on it (`heldout(profile)`, when given) and write it again with its [calibration]."""
    with StagedOutputs() as staged:  # never moved into place: only the final text replaces `out`
        # the file must load back through the real schema
        profile = load_profile(staged.stage_text(out, result.profile_toml))
        if heldout is not None:
            result.e2e = heldout(profile)
    # the profile carries its own held-out error ([calibration]), read back through the schema
    text = result.profile_toml.rstrip("\n") + "\n\n" + calibration_toml(result) + "\n"
    write_checked(out, text, load_profile)


def _summary(
    result: Calibration,
    out,
    backend: str,
    stat: str,
    launch_floor_s: float | None,
    stream_gbps: float,
    notes: dict,
) -> dict:
    f = result.fit
    return {
        "profile": str(out),
        "backend": backend,
        "stat": stat,
        "launch_overhead_us": f.launch_s * US_PER_S,
        "launch_floor_us": None if launch_floor_s is None else launch_floor_s * US_PER_S,
        "rates_gops": {c: float(r) / GIGA for c, r in f.rates.items()},
        "bandwidth_gbps": f.bandwidth_bytes_per_s / GB,
        "stream_read_gbps": stream_gbps,
        "fitted": list(f.fitted),
        "iterations": f.iterations,
        "ops_fitted": sum(not o.holdout for o in result.ops),
        "ops_held_out": sum(o.holdout for o in result.ops),
        "fit_mape_pct": result.fit_mape_pct,
        "per_op_mape_pct": result.per_op_mape_pct,
        "e2e_mape_pct": result.e2e_mape_pct,
        "e2e_fused_mape_pct": result.e2e_fused_mape_pct,
        "e2e_quiet_mape_pct": result.e2e_quiet_mape_pct,
        # the model's error on this host: end to end when the whole-model runs ran, else per op
        "host_model_mape_pct": (
            result.e2e_mape_pct if result.e2e_mape_pct is not None else result.per_op_mape_pct
        ),
        "notes": notes,
    }


def calibrate_op_file(
    path, out, name: str = "host", stream_gbps: float | None = None, stat: str = "min"
) -> tuple[Calibration, dict]:
    """Fit op times measured on a device (a CSV, see fit.load_op_times) and write the profile."""
    import psutil

    from harmony_ref.backends.host_timing import onchip_buffer_bytes

    ops = load_op_times(path)
    first = fit(ops, seed_bandwidth=(stream_gbps or 10.0) * GB, seed_rates=seed_rates(ops))
    stream = stream_gbps or first.bandwidth_bytes_per_s / GB
    nominal = dict(first.rates)  # no nominal peaks known: efficiency 1
    result = calibrate_ops(
        ops,
        stream,
        nominal,
        onchip_buffer_bytes(),
        psutil.virtual_memory().total,
        f"fitted to {path}",
        name,
    )
    _write_profile(result, out)
    notes = {"e2e": "not run: --backend command fits op times from a file"}
    return result, _summary(result, out, "command", stat, None, stream, notes)


def calibrate_host(
    out,
    name: str = "host",
    quick: bool = False,
    repeats: int = 5,
    threads: int = 1,
    stat: str = "min",
    launch_from_workloads: bool = False,
    e2e: bool = True,
    progress=None,
) -> tuple[Calibration, dict]:
    """Calibrate this CPU (see the module docstring); `progress()` is called per microbenchmark."""
    import numba
    import psutil

    from harmony_ref._threads import set_threads
    from harmony_ref.backends.host import HostDevice
    from harmony_ref.backends.host_timing import (
        cpu_flags,
        cpu_freq_mhz,
        onchip_buffer_bytes,
        stream_read_gbps,
    )
    from harmony_ref.calibrate.microbench import LoadCanary, measure_host_ops

    notes = {"blas": set_threads(threads), "threads": str(numba.get_num_threads())}
    canary = LoadCanary()  # baseline taken now, before the microbenchmarks
    stream = stream_read_gbps()
    host = HostDevice(repeats=max(3, repeats // 2), threads=threads)
    ops, launch = measure_host_ops(quick, repeats, progress=progress, stat=stat)
    fit_runs = []
    if launch_from_workloads:
        fit_runs = [
            host.run(workload_config(*w)) for w in (QUICK_FIT_WORKLOADS if quick else FIT_WORKLOADS)
        ]
    freq = cpu_freq_mhz() or 2000.0
    if not cpu_freq_mhz():
        notes["cpu_freq"] = "psutil exposes no CPU frequency: nominal peaks assume 2000 MHz"
    nominal = nominal_host_peaks(freq, numba.get_num_threads(), cpu_flags())
    result = calibrate_ops(
        ops,
        stream,
        nominal,
        onchip_buffer_bytes(),
        psutil.virtual_memory().total,
        f"this host, {numba.get_num_threads()} thread(s), {freq:.0f} MHz",
        name,
        phase_runs=fit_runs,
        stat=stat,
    )
    workloads = QUICK_WORKLOADS if quick else HELDOUT_WORKLOADS
    heldout = (lambda profile: heldout_e2e(profile, workloads, host, stat, canary)) if e2e else None
    _write_profile(result, out, heldout)
    return result, _summary(result, out, "host", stat, launch.time_s, stream, notes)


def workload_run_config(model: str, policy: str, prompt: int, new: int):
    """The RunConfig of a `--workloads` item: `model` a spec preset or a checkpoint (a shipped
    decoder name, a .gguf file, an HF directory: its spec from its own metadata, and the
    checkpoint what `{model}` fills in); `policy` a policy, or `as-stored` for a GGUF file
    (runtime/loader.py file_policy: the types its tensor table names)."""
    from harmony_ref.config import RunConfig
    from harmony_ref.quant.policy import AS_STORED
    from harmony_ref.runtime.loader import resolve_model

    spec, checkpoint = resolve_model(model)
    if policy == AS_STORED:  # the GGUF's own tensor types, read from its tensor table
        from harmony_ref.runtime.loader import file_policy

        policy = file_policy(model) if checkpoint else file_policy_refused(model)
    limit = spec.max_positions
    context = max(prompt + new, min(2048, limit))
    return RunConfig.from_names(spec, policy, prompt, new, context, checkpoint=checkpoint)


def file_policy_refused(model: str):
    from harmony_ref.quant.policy import AS_STORED

    raise ValueError(
        f"--workloads: policy {AS_STORED} needs a GGUF checkpoint as the model, got {model!r}"
    )


def _check_valid_repeats(m, cfg) -> None:
    """A session's workload with fewer unthrottled repeats than it asks for is not fitted."""
    from harmony_ref.lab.errors import BackendError

    if m.session is not None and m.session["valid_repeats"] < m.session["min_valid_repeats"]:
        raise BackendError(
            f"workload {cfg.label}: only {m.session['valid_repeats']} of "
            f"{m.session['repeats']} repeats ran unthrottled (the session asks "
            f"for {m.session['min_valid_repeats']}): not fitted"
        )


def phase_value(m, fmt: str, metric: str) -> float:
    """A phase time (PHASE_METRICS) of a benchmark command's measurement; ValueError when the
    format does not report it."""
    if metric not in m.metrics:
        raise ValueError(
            f"--parser {fmt} output has no {metric}: phase calibration "
            f"needs {list(PHASE_METRICS.values())}"
        )
    return m.metrics.value(metric)


def calibrate_phases(
    command_template: str,
    fmt: str,
    workloads,
    base_profile: str,
    timeout_s: float | None,
    out,
    name: str,
    session=None,
    progress=None,
) -> tuple[list[dict], dict]:
    """Run the command per workload ((model, policy, prompt, new) tuples), fit the base profile's
    efficiencies + launch overhead to the measured prefill and decode-step times, score on the
    held-out workloads (every third), write the profile. A run that fails raises BackendError.
    With `session` (a SessionSpec) each workload runs through that device session: its times
    are the medians over the unthrottled repeats, and a workload with fewer valid repeats than
    the session asks for is an error (a throttled phone fits the heat, not the runtime)."""
    from harmony_ref.backends.command import CommandDevice
    from harmony_ref.backends.simulated import SimulatedDevice

    base = load_profile(base_profile)
    dev = CommandDevice(command_template, fmt, timeout_s, session=session, progress=progress)
    rows, e2e_measured_ms, provenance = [], {}, {}
    configs = [workload_run_config(*w) for w in workloads]  # every bad name fails before a run
    for i, cfg in enumerate(configs):
        m = dev.run(cfg)
        _check_valid_repeats(m, cfg)
        provenance.update(
            {
                k: v
                for k, v in m.provenance.items()
                if k in ("device_model", "os_build", "cpu_info", "soc", "serial", "transport")
            }
        )
        for phase, metric in PHASE_METRICS.items():
            rows.append(
                {
                    "workload": cfg.label,
                    "cfg": cfg,
                    "phase": phase,
                    "holdout": i % 3 == 2,
                    "terms": phase_terms(base, cfg, phase),
                    "measured_s": phase_value(m, fmt, metric) / MS_PER_S,
                }
            )
        if "e2e_ms" in m.metrics:
            e2e_measured_ms[cfg.label] = m.metrics.value("e2e_ms")
    start = PhaseFit(
        base.compute.compute_efficiency,
        base.memory.memory_efficiency,
        base.runtime.launch_overhead_us / US_PER_S,
        0,
    )
    f = fit_phase_efficiencies(
        [(r["terms"], r["measured_s"]) for r in rows if not r["holdout"]], start
    )
    text, notes = profile_with_efficiencies(
        base_profile, f, name, f"{base_profile} calibrated to {command_template!r}"
    )
    write_checked(out, text, load_profile)
    sim = SimulatedDevice(load_profile(out))
    # a held-out workload that repeats a fitted one (the same item listed twice) is the fit's
    # own data: shown as "repeat of fit", never scored
    fitted_labels = {r["workload"] for r in rows if not r["holdout"]}
    table, scored = [], []  # scored[i]: table[i]'s (model, measured) pair, in the units scored
    for r in rows:
        predicted = sim.predict(r["cfg"])
        pred_s = predicted.value(PHASE_METRICS[r["phase"]]) / MS_PER_S
        held = "repeat of fit" if r["workload"] in fitted_labels else "held-out"
        table.append(
            {
                "workload": r["workload"],
                "phase": r["phase"],
                "set": held if r["holdout"] else "fit",
                "measured_ms": r["measured_s"] * MS_PER_S,
                "model_ms": pred_s * MS_PER_S,
                "ape_pct": ape_pct(pred_s, r["measured_s"]),
            }
        )
        scored.append((pred_s, r["measured_s"]))
        if r["phase"] == "decode" and r["workload"] in e2e_measured_ms:
            # end to end: prefill + every decode step, as the tool reported it; never fitted on
            pred_ms, meas_ms = predicted.value("e2e_ms"), e2e_measured_ms[r["workload"]]
            table.append(
                {
                    **table[-1],
                    "phase": "e2e",
                    "measured_ms": meas_ms,
                    "model_ms": pred_ms,
                    "ape_pct": ape_pct(pred_ms, meas_ms),
                }
            )
            scored.append((pred_ms, meas_ms))

    def mape(set_name, phases):
        pairs = [p for t, p in zip(table, scored) if t["set"] == set_name and t["phase"] in phases]
        return mape_pct(pairs) if pairs else None

    phases = tuple(PHASE_METRICS)
    summary = {
        "profile": str(out),
        "backend": "command",
        "base_profile": base.name,
        "compute_efficiency": f.compute_efficiency,
        "memory_efficiency": f.memory_efficiency,
        "launch_overhead_us": f.launch_s * US_PER_S,
        "iterations": f.iterations,
        "held_out_phase_mape_pct": mape("held-out", phases),
        "held_out_e2e_mape_pct": mape("held-out", ("e2e",)),
        "fit_phase_mape_pct": mape("fit", phases),
        "held_out_workloads": len({t["workload"] for t in table if t["set"] == "held-out"}),
        "provenance": provenance,
        "notes": notes,
    }
    return table, summary


# --- runtime profiles fitted on a measured set (host, llama.cpp, published figures) -----------

PHONE_PARAMS = ("matmul", "memory")


def calibrate_runtime_on_set(
    set_name: str,
    runtime: str,
    out,
    figures=None,
    params: tuple[str, ...] | None = None,
    multistart: bool = True,
) -> dict:
    """Fit `runtime` on the fit points of a measured set (calibrate/points.py) and write the
    runtime profile to `out` (loaded back through the schema). Sets: "host" (the per-call NNLS
    of calibrate/host_runs.py), "llama.cpp" (calibrate/llamacpp.py), "phones" (the figures of
    `figures`, default the shipped ones, whose runtime is `runtime`; the shared numbers over every
    SoC, then each SoC's own matmul where its figures pin one: fit_runtime.fit_soc_efficiencies).
    Returns a summary."""
    from harmony_ref.calibrate.fit_runtime import (
        PARAMS,
        calibrated,
        fit_on_points,
        fit_soc_efficiencies,
        get_param,
        held_out_mape,
        point_rows,
        runtime_toml,
        shared_only,
        with_held_out,
    )
    from harmony_ref.device.runtime import load_runtime

    base = load_runtime(runtime)
    if set_name == "host":
        from harmony_ref.calibrate.host_runs import fit_host_runtime, host_points

        rt, info = fit_host_runtime()
        fitted = tuple(info["refined"]) + ("forward_us",)
        rows, extra = [], info
        points = host_points()
    else:
        if set_name == "llama.cpp":
            from harmony_ref.calibrate.llamacpp import llamacpp_points, load_llamacpp_manifest

            manifest = load_llamacpp_manifest()
            points = [p for p in llamacpp_points(manifest) if p.runtime == runtime]
            params = params or manifest.fit_params
        elif set_name == "phones":
            from harmony_ref.calibrate.published import figure_points, load_figures

            points = [p for p in figure_points(load_figures(figures)) if p.runtime == runtime]
            wants_memory = any(p.metric == "peak_memory_mb" for p in points)
            compiled = base.overhead.graph == "compiled"  # its per-graph cost, not per-op
            params = params or (
                PHONE_PARAMS
                + (("graph_us",) if compiled else ())
                + (("workspace_mb",) if wants_memory else ())
            )
            base = shared_only(base)  # the shared numbers are refitted over every SoC
        else:
            raise ValueError(f"--set {set_name!r}: must be host, llama.cpp or phones")
        fit_pts = [p for p in points if p.split == "fit"]
        if not fit_pts:
            raise ValueError(f"--set {set_name}: no fit points for runtime {runtime!r}")
        from harmony_ref.calibrate.points import check_disjoint

        check_disjoint(fit_pts, [p for p in points if p.split == "score"], f"--set {set_name}")
        rt, report = fit_on_points(base, fit_pts, tuple(params), multistart)
        method = f"least squares on log error (calibrate/fit_runtime.py), set {set_name}"
        soc_rows: list[dict] = []
        if set_name == "phones":
            rt, soc_rows = fit_soc_efficiencies(rt, fit_pts)
            if soc_rows:
                method += "; then each SoC's own matmul on its own points"
        rows, fit_mape = point_rows(rt, fit_pts)
        rt = calibrated(
            rt,
            method,
            [p.id for p in fit_pts],
            [p.id for p in points if p.split == "score"],
            fit_mape,
        )
        fitted = report.fitted
        extra = {"not_fitted": list(report.not_fitted), "soc_efficiency": soc_rows}
    held = held_out_mape(rt, points)
    rt = with_held_out(rt, held)
    comments = _inline_comments(base.source)
    if set_name == "host":  # matmul and memory are what unset classes fall back to
        comments["efficiency.matmul"] = "= int4 (the class every unset one falls back to)"
        comments["efficiency.memory"] = "= cache (SmolLM2's weights stay in this machine's L3)"
    for name, (sec, key, _, _) in PARAMS.items():
        where = f"{sec}.{key}" if sec else key
        if name in fitted:
            comments[where] = f"fitted on set {set_name} ({len(rt.calibration.fitted_on)} points)"
        elif name == "fp16_widen_ns" and not get_param(base, name):
            comments[where] = comments.get(where) or "none: its kernels read fp16 weights as stored"
        elif get_param(base, name) is not None:
            comments[where] = comments.get(where) or "prior (not fitted): assumption"
    header = (
        f"{rt.description}\nWritten by `harmony-ref calibrate --set {set_name} --runtime "
        f"{runtime}`: numbers marked fitted come from the measurements [calibration] names;\n"
        "the rest are the prior profile's assumptions."
    )
    text = runtime_toml(rt, comments, header)
    write_checked(out, text, load_runtime)  # must load back through the schema
    return {
        "runtime": runtime,
        "set": set_name,
        "out": str(out),
        "fitted": list(fitted),
        "fit_mape_pct": rt.calibration.fit_mape_pct,
        "fitted_on": list(rt.calibration.fitted_on),
        "scored_on": list(rt.calibration.scored_on),
        "held_out_mape_pct": held,
        "rows": rows,
        **extra,
    }


def _inline_comments(path) -> dict[str, str]:
    """{"section.key" or "key": its inline comment} of a TOML file written by hand, so a
    rewritten profile keeps the sources of the numbers it did not fit."""
    import re
    from importlib import resources
    from pathlib import Path

    out, section = {}, ""
    p = Path(str(path))
    if not p.is_file():  # a shipped file: its source is relative to the package
        p = Path(str(resources.files("harmony_ref"))) / str(path)
    if not p.is_file():
        return out
    for line in p.read_text().splitlines():
        head = re.match(r"^\[([^\]]+)\]", line)
        if head:
            section = head.group(1)
            continue
        m = re.match(r"^(\w[\w.-]*)\s*=\s*[^#]*#\s*(.*)$", line)
        if m:
            out[f"{section}.{m.group(1)}" if section else m.group(1)] = m.group(2).strip()
    return out
