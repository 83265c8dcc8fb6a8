"""`harmony-ref calibrate`: fit a host (or device) profile to measured op times and report the
model's error on measurements it was not fitted on (per op and end to end, as MAPE)."""

from __future__ import annotations

import sys

from harmony_ref.commands._output import add_json_flag, print_json, print_table

NAME = "calibrate"
HELP = (
    "fit efficiency factors + launch overhead to measured ops, write a profile, "
    "report held-out MAPE"
)


def add_arguments(p) -> None:
    from harmony_ref.backends.parsers import FORMATS
    from harmony_ref.commands._args import number

    p.add_argument(
        "--backend",
        choices=("host", "command"),
        default="host",
        help="host: run the microbenchmarks here; command: measured op times (--ops) "
        "or phase times from a benchmark command (--command)",
    )
    p.add_argument(
        "--ops",
        metavar="CSV",
        help="--backend command: op times measured on the device (columns name, "
        "rate_class, ops, bytes, launches, time_us[, holdout, vector_ops])",
    )
    p.add_argument(
        "--command",
        dest="command_template",
        metavar="CMD",
        help="--backend command: a benchmark command template run once per workload; "
        "{model} {policy} {prompt_tokens} {new_tokens} {context_tokens} are filled in",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        help="output format of --command (it must report prefill_ms and decode_step_ms)",
    )
    p.add_argument(
        "--session",
        metavar="FILE",
        help="--command: run each workload through a device session (transport, "
        "pushes, cooldown, repeats, telemetry; throttled repeats left out); its "
        "benchmark command and format are the default",
    )
    p.add_argument(
        "--workloads",
        metavar="M:P:PROMPT:NEW;...",
        help="--command: workloads as model:policy:prompt_tokens:new_tokens separated "
        "by ';' (at least 4: every third is held out)",
    )
    p.add_argument(
        "--profile",
        default="harmony-flagship",
        help="--command: base profile whose efficiencies and launch overhead are fitted",
    )
    p.add_argument(
        "--timeout",
        type=number(0, above=True),
        default=600.0,
        metavar="S",
        help="--command: kill a run after S seconds (default 600)",
    )
    p.add_argument(
        "--stream-gbps",
        type=number(0, above=True),
        help="--backend command: the device's measured read bandwidth (GB/s); default: the fit's",
    )
    p.add_argument("--out", default="host.toml", help="profile TOML to write (default host.toml)")
    p.add_argument("--name", default="host", help="profile name (default host)")
    p.add_argument(
        "--quick", action="store_true", help="fewer sizes and one held-out workload (CI)"
    )
    p.add_argument(
        "--repeats",
        type=_positive_int,
        default=5,
        help="timed repeats per microbenchmark (default 5)",
    )
    p.add_argument(
        "--threads",
        type=_positive_int,
        default=1,
        help="Numba and BLAS threads (default 1: on a shared machine a preempted worker "
        "thread stalls a parallel kernel for a scheduler slice)",
    )
    p.add_argument(
        "--stat",
        choices=("min", "median"),
        default="min",
        help="time per op used to fit and score: min (default: the least disturbed "
        "repeat on a shared machine) or median",
    )
    p.add_argument(
        "--launch-from-workloads",
        action="store_true",
        help="refit the launch overhead on the phase totals of a few whole-model fit "
        "workloads (the real op mix) instead of taking it from the microbenchmarks",
    )
    p.add_argument("--no-e2e", action="store_true", help="skip the held-out whole-model runs")
    p.add_argument(
        "--set",
        dest="fit_set",
        choices=("host", "llama.cpp", "phones"),
        help="fit a runtime profile (--runtime) on the fit points of a measured set "
        "(the committed host runs, llama-bench runs, or published figures) and "
        "write it to --out",
    )
    p.add_argument("--runtime", help="--set / --command: the runtime profile to fit (name or path)")
    p.add_argument(
        "--figures",
        metavar="TOML",
        help="--set phones: a file of published figures (default the shipped ones)",
    )
    p.add_argument("--params", help="--set: comma-separated parameters to fit (e.g. matmul,memory)")
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
    from rich.progress import Progress

    from harmony_ref._io import check_output_file
    from harmony_ref.calibrate import run as calibrate

    check_output_file(args.out, "--out")  # before minutes of measuring
    if args.session and args.backend != "command":
        raise ValueError("--session applies to --backend command")
    if args.figures and not args.fit_set:
        raise ValueError(f"--figures {args.figures}: applies to --set phones")
    if args.params and not args.fit_set:
        raise ValueError(f"--params {args.params}: applies to --set")
    if args.fit_set:
        return _run_set_calibration(args)
    if args.backend == "command" and (args.command_template or args.session):
        return _run_phase_calibration(args)
    if args.backend == "command":
        if not args.ops:
            raise ValueError(
                "--backend command needs --ops CSV (op times measured on the device) "
                "or --command/--format/--workloads (phase times from repeated runs)"
            )
        result, summary = calibrate.calibrate_op_file(
            args.ops, args.out, args.name, args.stream_gbps, args.stat
        )
    else:
        from rich.console import Console

        from harmony_ref.calibrate.microbench import count_host_ops

        with Progress(console=Console(stderr=True), transient=True) as prog:
            task = prog.add_task("microbenchmarks", total=count_host_ops(args.quick))
            result, summary = calibrate.calibrate_host(
                args.out,
                args.name,
                args.quick,
                args.repeats,
                args.threads,
                args.stat,
                args.launch_from_workloads,
                e2e=not args.no_e2e,
                progress=lambda: prog.advance(task),
            )
    if args.json:
        print_json(
            {**summary, "ops": result.op_table().to_dict(orient="records"), "e2e": result.e2e}
        )
        return 0
    table = result.op_table()
    print_table(
        table[table["set"] == "held-out"], title="held-out microbenchmarks: measured vs model"
    )
    if result.e2e:
        import pandas as pd

        print_table(
            pd.DataFrame(result.e2e),
            title="held-out whole-model runs: HostDevice vs SimulatedDevice(profile)",
        )
    for k, v in summary.items():
        if k != "notes":
            print(f"{k}: {v}")
    for k, v in summary["notes"].items():
        print(f"note {k}: {v}")
    return 0


def _parse_workloads(text: str) -> list[tuple[str, str, int, int]]:
    out = []
    for item in (text or "").split(";"):
        if not item.strip():
            continue
        parts = item.strip().split(":")
        if len(parts) != 4:
            raise ValueError(
                f"--workloads item {item!r}: expected model:policy:prompt_tokens:new_tokens"
            )
        try:
            out.append((parts[0], parts[1], int(parts[2]), int(parts[3])))
        except ValueError as e:
            raise ValueError(f"--workloads item {item!r}: {e}") from e
    if len(out) < 4:
        raise ValueError(
            f"--workloads: need at least 4 (3 to fit, every third held out), got {len(out)}"
        )
    return out


def _run_phase_calibration(args) -> int:
    """Phase-level calibration of a phone profile from a benchmark command (calibrate/run.py)."""
    from harmony_ref.backends.base import BackendError
    from harmony_ref.backends.transport import DeviceGone
    from harmony_ref.calibrate.run import calibrate_phases
    from harmony_ref.commands import _session

    session = _session.load(args.session)
    command = args.command_template or (session.benchmark.command if session else "")
    fmt = args.format or (session.benchmark.format if session else "")
    if not command:
        raise ValueError(
            "--backend command needs --command (or a --session with a benchmark command)"
        )
    if not fmt:
        raise ValueError("--command needs --format")
    workloads = _parse_workloads(args.workloads)
    try:
        progress = _session.progress(args.json) if session else None
        timeout = None if session else args.timeout
        if args.runtime:
            from harmony_ref.calibrate.run import calibrate_runtime_phases

            table, summary = calibrate_runtime_phases(
                command,
                fmt,
                workloads,
                args.profile,
                args.runtime,
                timeout,
                args.out,
                session=session,
                progress=progress,
            )
        else:
            table, summary = calibrate_phases(
                command,
                fmt,
                workloads,
                args.profile,
                timeout,
                args.out,
                args.name,
                session=session,
                progress=progress,
            )
    except DeviceGone as e:
        return _session.gone_exit(NAME, e)
    except BackendError as e:
        print(f"harmony-ref calibrate: error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print_json({**summary, "phases": table})
        return 0
    import pandas as pd

    print_table(
        pd.DataFrame(table), title="phase and end-to-end times: measured vs calibrated model"
    )
    for k, v in summary.items():
        print(f"{k}: {v}")
    return 0


def _run_set_calibration(args) -> int:
    from harmony_ref.calibrate.run import calibrate_runtime_on_set

    if not args.runtime:
        raise ValueError("--set needs --runtime (the runtime profile to fit)")
    if args.figures and args.fit_set != "phones":
        raise ValueError(f"--figures {args.figures}: applies to --set phones, not {args.fit_set}")
    params = tuple(p.strip() for p in args.params.split(",")) if args.params else None
    summary = calibrate_runtime_on_set(args.fit_set, args.runtime, args.out, args.figures, params)
    if args.json:
        print_json(summary)
        return 0
    import pandas as pd

    if summary["rows"]:
        print_table(
            pd.DataFrame(summary["rows"]),
            title=f"fit points of {args.runtime}: measured vs fitted model",
        )
    if summary.get("soc_efficiency"):
        print_table(
            pd.DataFrame(summary["soc_efficiency"]).assign(
                fitted_on=lambda d: d["fitted_on"].map(", ".join)
            ),
            title="SoCs with a matmul efficiency of their own (the rest take the shared one)",
        )
    for k in ("runtime", "set", "out", "fitted", "fit_mape_pct", "fitted_on", "scored_on"):
        print(f"{k}: {summary[k]}")
    return 0
