"""`harmony-ref calibrate`: fit a host (or device) profile to measured op times and report the
model's error on measurements it was not fitted on (per op and end to end, as MAPE)."""

from __future__ import annotations

import sys

from harmony_ref.commands._output import add_json_flag, print_json, print_table
from harmony_ref.units import GB, GIGA, MS_PER_S, US_PER_S

NAME = "calibrate"
HELP = ("fit efficiency factors + launch overhead to measured ops, write a profile, "
        "report held-out MAPE")


def add_arguments(p) -> None:
    from harmony_ref.backends.parsers import FORMATS

    p.add_argument("--backend", choices=("host", "command"), default="host",
                   help="host: run the microbenchmarks here; command: measured op times (--ops) "
                        "or phase times from a benchmark command (--command)")
    p.add_argument("--ops", metavar="CSV",
                   help="--backend command: op times measured on the device (columns name, "
                        "rate_class, ops, bytes, launches, time_us[, holdout, vector_ops])")
    p.add_argument("--command", dest="command_template", metavar="CMD",
                   help="--backend command: a benchmark command template run once per workload; "
                        "{model} {policy} {prompt_tokens} {new_tokens} {context_tokens} are filled in")
    p.add_argument("--format", choices=FORMATS,
                   help="output format of --command (it must report prefill_ms and decode_step_ms)")
    p.add_argument("--workloads", metavar="M:P:PROMPT:NEW;...",
                   help="--command: workloads as model:policy:prompt_tokens:new_tokens separated "
                        "by ';' (at least 4: every third is held out)")
    p.add_argument("--profile", default="harmony-flagship",
                   help="--command: base profile whose efficiencies and launch overhead are fitted")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="--command: kill a run after S seconds (default 600)")
    p.add_argument("--stream-gbps", type=float,
                   help="--backend command: the device's measured read bandwidth (GB/s); "
                        "default: the fit's")
    p.add_argument("--out", default="host.toml", help="profile TOML to write (default host.toml)")
    p.add_argument("--name", default="host", help="profile name (default host)")
    p.add_argument("--quick", action="store_true",
                   help="fewer sizes and one held-out workload (CI)")
    p.add_argument("--repeats", type=_positive_int, default=5,
                   help="timed repeats per microbenchmark (default 5)")
    p.add_argument("--threads", type=_positive_int, default=1,
                   help="Numba and BLAS threads (default 1: on a shared machine a preempted worker "
                        "thread stalls a parallel kernel for a scheduler slice)")
    p.add_argument("--stat", choices=("min", "median"), default="min",
                   help="time per op used to fit and score: min (default: the least disturbed "
                        "repeat on a shared machine) or median")
    p.add_argument("--launch-from-workloads", action="store_true",
                   help="refit the launch overhead on the phase totals of a few whole-model fit "
                        "workloads (the real op mix) instead of taking it from the microbenchmarks")
    p.add_argument("--no-e2e", action="store_true", help="skip the held-out whole-model runs")
    add_json_flag(p)


def _positive_int(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def run(args) -> int:
    import psutil
    from rich.progress import Progress

    from harmony_ref.device.profile import load_profile
    from harmony_ref.calibrate import fit as cal
    from harmony_ref._io import write_text_atomic

    notes = {}
    if args.backend == "command" and args.command_template:
        return _run_phase_calibration(args)
    if args.backend == "command":
        if not args.ops:
            raise ValueError("--backend command needs --ops CSV (op times measured on the device) "
                             "or --command/--format/--workloads (phase times from repeated runs)")
        ops = cal.load_op_times(args.ops)
        first = cal.fit(ops, seed_bandwidth=(args.stream_gbps or 10.0) * GB,
                        seed_rates=cal.seed_rates(ops))
        stream = args.stream_gbps or first.bandwidth_bytes_per_s / GB
        nominal = dict(first.rates)  # no nominal peaks known: efficiency 1
        from harmony_ref.calibrate.microbench import onchip_buffer_bytes

        result = cal.calibrate_ops(ops, stream, nominal, onchip_buffer_bytes(),
                                   psutil.virtual_memory().total,
                                   f"fitted to {args.ops}", args.name)
        launch_floor = None
        notes["e2e"] = "not run: --backend command fits op times from a file"
    else:
        import numba

        from harmony_ref._threads import set_threads
        from harmony_ref.calibrate import microbench as mb
        from harmony_ref.backends.host_timing import cpu_freq_mhz

        notes["blas"] = set_threads(args.threads)
        notes["threads"] = str(numba.get_num_threads())
        canary = mb.LoadCanary()  # baseline taken now, before the microbenchmarks
        stream = mb.stream_read_gbps()
        from harmony_ref.backends.host import HostDevice

        host = HostDevice(repeats=max(3, args.repeats // 2), threads=args.threads)
        with Progress(transient=True, disable=args.json or not sys.stderr.isatty()) as prog:
            task = prog.add_task("microbenchmarks", total=mb.count_host_ops(args.quick))
            ops, launch = mb.measure_host_ops(args.quick, args.repeats,
                                              progress=lambda: prog.advance(task), stat=args.stat)
        fit_runs = []
        if args.launch_from_workloads:
            fit_runs = [host.run(cal.workload_config(*w))
                        for w in (cal.QUICK_FIT_WORKLOADS if args.quick else cal.FIT_WORKLOADS)]
        freq = cpu_freq_mhz() or 2000.0
        if not cpu_freq_mhz():
            notes["cpu_freq"] = "psutil exposes no CPU frequency: nominal peaks assume 2000 MHz"
        nominal = cal.nominal_host_peaks(freq, numba.get_num_threads(), cal.cpu_flags())
        result = cal.calibrate_ops(ops, stream, nominal, mb.onchip_buffer_bytes(),
                                   psutil.virtual_memory().total,
                                   f"this host, {numba.get_num_threads()} thread(s), {freq:.0f} MHz",
                                   args.name, phase_runs=fit_runs, stat=args.stat)
        launch_floor = launch.time_s
    write_text_atomic(args.out, result.profile_toml)
    profile = load_profile(args.out)  # the file must load back through the real schema
    if args.backend == "host" and not args.no_e2e:
        workloads = cal.QUICK_WORKLOADS if args.quick else cal.HELDOUT_WORKLOADS
        result.e2e = cal.heldout_e2e(profile, workloads, host, args.stat, canary)
    # the profile carries its own held-out error ([calibration]), read back through the schema
    write_text_atomic(args.out, result.profile_toml.rstrip("\n") + "\n\n" + cal.calibration_toml(result) + "\n")
    load_profile(args.out)
    f = result.fit
    summary = {
        "profile": str(args.out),
        "backend": args.backend,
        "stat": args.stat,
        "launch_overhead_us": f.launch_s * US_PER_S,
        "launch_floor_us": None if launch_floor is None else launch_floor * US_PER_S,
        "rates_gops": {c: float(r) / GIGA for c, r in f.rates.items()},
        "bandwidth_gbps": f.bandwidth_bytes_per_s / GB,
        "stream_read_gbps": stream,
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
        "host_model_mape_pct": (result.e2e_mape_pct if result.e2e_mape_pct is not None
                                else result.per_op_mape_pct),
        "notes": notes,
    }
    if args.json:
        print_json({**summary, "ops": result.op_table().to_dict(orient="records"),
                    "e2e": result.e2e})
        return 0
    table = result.op_table()
    print_table(table[table["set"] == "held-out"],
                title="held-out microbenchmarks: measured vs model")
    if result.e2e:
        import pandas as pd

        print_table(pd.DataFrame(result.e2e),
                    title="held-out whole-model runs: HostDevice vs SimulatedDevice(profile)")
    for k, v in summary.items():
        if k != "notes":
            print(f"{k}: {v}")
    for k, v in notes.items():
        print(f"note {k}: {v}")
    return 0


def _parse_workloads(text: str) -> list[tuple[str, str, int, int]]:
    out = []
    for item in (text or "").split(";"):
        if not item.strip():
            continue
        parts = item.strip().split(":")
        if len(parts) != 4:
            raise ValueError(f"--workloads item {item!r}: "
                             "expected model:policy:prompt_tokens:new_tokens")
        try:
            out.append((parts[0], parts[1], int(parts[2]), int(parts[3])))
        except ValueError as e:
            raise ValueError(f"--workloads item {item!r}: {e}") from e
    if len(out) < 4:
        raise ValueError("--workloads: need at least 4 (3 to fit, every third held out), "
                         f"got {len(out)}")
    return out


def _run_phase_calibration(args) -> int:
    """Run the command per workload, fit the base profile's efficiencies + launch overhead to the
    measured prefill and decode-step times, score on held-out workloads, write the profile."""
    from harmony_ref.config import RunConfig
    from harmony_ref.device.profile import load_profile
    from harmony_ref.calibrate import fit as cal
    from harmony_ref.backends.base import BackendError
    from harmony_ref.backends.command import CommandDevice
    from harmony_ref.backends.simulated import SimulatedDevice
    from harmony_ref.metrics import ape_pct, mape_pct
    from harmony_ref._io import write_text_atomic

    if not args.format:
        raise ValueError("--command needs --format")
    base = load_profile(args.profile)
    dev = CommandDevice(args.command_template, args.format, args.timeout)
    rows, e2e_measured_ms, provenance = [], {}, {}
    for i, (model, policy, prompt, new) in enumerate(_parse_workloads(args.workloads)):
        cfg = RunConfig.from_names(model=model, policy=policy, prompt_tokens=prompt, new_tokens=new,
                                context_tokens=max(2048, prompt + new))
        try:
            m = dev.run(cfg)
        except BackendError as e:
            print(f"harmony-ref calibrate: error: {e}", file=sys.stderr)
            return 1
        provenance.update({k: v for k, v in m.provenance.items()
                           if k in ("device_model", "os_build", "cpu_info")})
        for phase, metric in cal.PHASE_METRICS.items():
            if metric not in m.metrics:
                raise ValueError(f"--format {args.format} output has no {metric}: phase calibration "
                                 f"needs {list(cal.PHASE_METRICS.values())}")
            rows.append({"workload": cfg.label, "cfg": cfg, "phase": phase, "holdout": i % 3 == 2,
                         "terms": cal.phase_terms(base, cfg, phase),
                         "measured_s": m.metrics.value(metric) / MS_PER_S})
        if "e2e_ms" in m.metrics:
            e2e_measured_ms[cfg.label] = m.metrics.value("e2e_ms")
    start = cal.PhaseFit(base.compute.compute_efficiency, base.memory.memory_efficiency,
                         base.runtime.launch_overhead_us / US_PER_S, 0)
    f = cal.fit_phase_efficiencies([(r["terms"], r["measured_s"]) for r in rows if not r["holdout"]],
                                   start)
    text, notes = cal.profile_with_efficiencies(
        args.profile, f, args.name, f"{args.profile} calibrated to {args.command_template!r}")
    write_text_atomic(args.out, text)
    sim = SimulatedDevice(load_profile(args.out))
    table, scored = [], []  # scored[i]: table[i]'s (model, measured) pair, in the units scored
    for r in rows:
        predicted = sim.predict(r["cfg"])
        pred_s = predicted.value(cal.PHASE_METRICS[r["phase"]]) / MS_PER_S
        table.append({"workload": r["workload"], "phase": r["phase"],
                      "set": "held-out" if r["holdout"] else "fit",
                      "measured_ms": r["measured_s"] * MS_PER_S, "model_ms": pred_s * MS_PER_S,
                      "ape_pct": ape_pct(pred_s, r["measured_s"])})
        scored.append((pred_s, r["measured_s"]))
        if r["phase"] == "decode" and r["workload"] in e2e_measured_ms:
            # end to end: prefill + every decode step, as the tool reported it; never fitted on
            pred_ms, meas_ms = predicted.value("e2e_ms"), e2e_measured_ms[r["workload"]]
            table.append({**table[-1], "phase": "e2e", "measured_ms": meas_ms, "model_ms": pred_ms,
                          "ape_pct": ape_pct(pred_ms, meas_ms)})
            scored.append((pred_ms, meas_ms))

    def mape(set_name, phases):
        pairs = [p for t, p in zip(table, scored) if t["set"] == set_name and t["phase"] in phases]
        return mape_pct(pairs) if pairs else None

    phases = tuple(cal.PHASE_METRICS)
    summary = {"profile": str(args.out), "backend": "command", "base_profile": base.name,
               "compute_efficiency": f.compute_efficiency, "memory_efficiency": f.memory_efficiency,
               "launch_overhead_us": f.launch_s * US_PER_S, "iterations": f.iterations,
               "held_out_phase_mape_pct": mape("held-out", phases),
               "held_out_e2e_mape_pct": mape("held-out", ("e2e",)),
               "fit_phase_mape_pct": mape("fit", phases),
               "provenance": provenance, "notes": notes}
    if args.json:
        print_json({**summary, "phases": table})
        return 0
    import pandas as pd

    print_table(pd.DataFrame(table),
                title="phase and end-to-end times: measured vs calibrated model")
    for k, v in summary.items():
        print(f"{k}: {v}")
    return 0
