"""`harmony-ref calibrate`: fit a host (or device) profile to measured op times and report the
model's error on measurements it was not fitted on (per op and end to end, as MAPE)."""

from __future__ import annotations

import sys

from harmony_ref.commands._output import add_json_flag, print_json, print_table

NAME = "calibrate"
HELP = "fit efficiency factors + launch overhead to measured ops, write a profile, report held-out MAPE"


def add_arguments(p) -> None:
    p.add_argument("--backend", choices=("host", "command"), default="host",
                   help="host: run the microbenchmarks here; command: read measured op times (--ops)")
    p.add_argument("--ops", metavar="CSV", help="--backend command: op times measured on the device "
                   "(columns name, rate_class, ops, bytes, launches, time_us[, holdout, vector_ops])")
    p.add_argument("--stream-gbps", type=float, help="--backend command: the device's measured read "
                   "bandwidth (GB/s); default: the fit's")
    p.add_argument("--out", default="host.toml", help="profile TOML to write (default host.toml)")
    p.add_argument("--name", default="host", help="profile name (default host)")
    p.add_argument("--quick", action="store_true", help="fewer sizes and one held-out workload (CI)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per microbenchmark (default 5)")
    p.add_argument("--threads", type=int, default=1,
                   help="Numba and BLAS threads (default 1: on a shared machine a preempted worker "
                        "thread stalls a parallel kernel for a scheduler slice)")
    p.add_argument("--stat", choices=("min", "median"), default="min",
                   help="time per op used to fit and score: min (default: the least disturbed repeat on a "
                        "shared machine) or median")
    p.add_argument("--launch-from-workloads", action="store_true",
                   help="refit the launch overhead on the phase totals of a few whole-model fit workloads "
                        "(the real op mix) instead of taking it from the microbenchmarks")
    p.add_argument("--no-e2e", action="store_true", help="skip the held-out whole-model runs")
    add_json_flag(p)


def run(args) -> int:
    import psutil
    from rich.progress import Progress

    from harmony_ref.device.profile import load_profile
    from harmony_ref.hil import calibrate as cal

    notes = {}
    if args.backend == "command":
        if not args.ops:
            raise ValueError("--backend command needs --ops CSV (op times measured on the device)")
        ops = cal.load_op_times(args.ops)
        first = cal.fit([o for o in ops], seed_bandwidth=(args.stream_gbps or 10.0) * 1e9, seed_rates=cal.seed_rates(ops))
        stream = args.stream_gbps or first.bandwidth_bytes_per_s / 1e9
        nominal = {c: r for c, r in first.rates.items()}  # no nominal peaks known: efficiency 1
        from harmony_ref.hil.microbench import onchip_buffer_bytes

        result = cal.calibrate_ops(ops, stream, nominal, onchip_buffer_bytes(), psutil.virtual_memory().total,
                                   f"fitted to {args.ops}", args.name)
        launch_floor = None
        notes["e2e"] = "not run: --backend command fits op times from a file"
    else:
        import numba

        from harmony_ref.hil import microbench as mb
        from harmony_ref.hil._timing import cpu_freq_mhz, set_blas_threads

        numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
        notes["blas"] = set_blas_threads(args.threads)
        notes["threads"] = str(numba.get_num_threads())
        stream = mb.stream_read_gbps()
        from harmony_ref.hil.host import HostDevice

        host = HostDevice(repeats=max(3, args.repeats // 2), threads=args.threads)
        with Progress(transient=True, disable=args.json or not sys.stderr.isatty()) as prog:
            task = prog.add_task("microbenchmarks", total=mb.count_host_ops(args.quick))
            ops, launch = mb.measure_host_ops(args.quick, args.repeats, progress=lambda: prog.advance(task),
                                              stat=args.stat)
        fit_runs = []
        if args.launch_from_workloads:
            fit_runs = [host.measure(cal.workload_config(*w))
                        for w in (cal.QUICK_FIT_WORKLOADS if args.quick else cal.FIT_WORKLOADS)]
        freq = cpu_freq_mhz() or 2000.0
        if not cpu_freq_mhz():
            notes["cpu_freq"] = "psutil exposes no CPU frequency: nominal peaks assume 2000 MHz"
        nominal = cal.nominal_host_peaks(freq, numba.get_num_threads(), cal.cpu_flags())
        result = cal.calibrate_ops(ops, stream, nominal, mb.onchip_buffer_bytes(), psutil.virtual_memory().total,
                                   f"this host, {numba.get_num_threads()} thread(s), {freq:.0f} MHz", args.name,
                                   phase_runs=fit_runs, stat=args.stat)
        launch_floor = launch.time_s
    cal.write_atomic(args.out, result.profile_toml)
    profile = load_profile(args.out)  # the file must load back through the real schema
    if args.backend == "host" and not args.no_e2e:
        result.e2e = cal.heldout_e2e(profile, cal.QUICK_WORKLOADS if args.quick else cal.HELDOUT_WORKLOADS, host,
                                     args.stat)
    f = result.fit
    summary = {
        "profile": str(args.out),
        "backend": args.backend,
        "stat": args.stat,
        "launch_overhead_us": f.launch_s * 1e6,
        "launch_floor_us": None if launch_floor is None else launch_floor * 1e6,
        "rates_gops": {c: r / 1e9 for c, r in f.rates.items()},
        "bandwidth_gbps": f.bandwidth_bytes_per_s / 1e9,
        "stream_read_gbps": stream,
        "fitted": list(f.fitted),
        "iterations": f.iterations,
        "ops_fitted": sum(not o.holdout for o in result.ops),
        "ops_held_out": sum(o.holdout for o in result.ops),
        "fit_mape_pct": result.fit_mape_pct,
        "per_op_mape_pct": result.per_op_mape_pct,
        "e2e_mape_pct": result.e2e_mape_pct,
        "e2e_fused_mape_pct": result.e2e_fused_mape_pct,
        "host_model_mape_pct": result.e2e_mape_pct if result.e2e_mape_pct is not None else result.per_op_mape_pct,
        "notes": notes,
    }
    if args.json:
        print_json({**summary, "ops": result.op_table().to_dict(orient="records"), "e2e": result.e2e})
        return 0
    table = result.op_table()
    print_table(table[table["set"] == "held-out"], title="held-out microbenchmarks: measured vs model")
    if result.e2e:
        import pandas as pd

        print_table(pd.DataFrame(result.e2e), title="held-out whole-model runs: HostDevice vs SimulatedDevice(profile)")
    for k, v in summary.items():
        if k not in ("notes",):
            print(f"{k}: {v}")
    for k, v in notes.items():
        print(f"note {k}: {v}")
    return 0
