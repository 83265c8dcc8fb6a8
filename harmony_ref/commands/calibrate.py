"""`harmony-ref calibrate`: fit a host (or device) profile to measured op times and report the
model's error on measurements it was not fitted on (per op and end to end, as MAPE)."""

from __future__ import annotations

import sys
from pathlib import Path

from harmony_ref._format import error_line
from harmony_ref._io import check_output_file
from harmony_ref.commands._output import add_json_flag, print_json, print_table

NAME = "calibrate"
HELP = (
    "fit efficiency factors + launch overhead to measured ops, write a profile, "
    "report held-out MAPE"
)


def add_arguments(p) -> None:
    from harmony_ref.commands._args import add_renamed, number
    from harmony_ref.lab.parsers import OUTPUT_FORMATS

    p.add_argument(
        "--backend",
        choices=("host", "command", "executorch"),
        default="host",
        help="host: measure and fit this machine (--method); command: measured op times "
        "(--ops) or phase times from a benchmark command (--command); executorch: "
        "ExecuTorch programs (--workloads of .pte files) run on this host, fitting the "
        "executorch-xnnpack runtime (--runtime) on this machine's SoC profile",
    )
    p.add_argument(
        "--method",
        choices=("runs", "microbench"),
        default="runs",
        help="--backend host: runs (default) times real prefill and decode steps of --model "
        "per call, fits the harmony-ref-host runtime on the fit runs and scores the held-out "
        "ones (writes OUT and OUT's .runtime.toml); microbench fits isolated GEMV/GEMM "
        "microbenchmarks (the older, coarser method)",
    )
    p.add_argument(
        "--model",
        help="--backend host --method runs: the checkpoint to generate with (a shipped name, "
        "a .gguf file or an HF directory; default smollm2-135m)",
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
        "{model} {policy} {prompt_tokens} {new_tokens} {context_tokens} {threads} {depth} are "
        "filled in",
    )
    add_renamed(
        p,
        "--parser",
        choices=OUTPUT_FORMATS,
        help="parser of --command's output (it must report prefill_ms and decode_step_ms)",
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
        metavar="M:P:PROMPT:NEW[:THREADS[:DEPTH]];...",
        help="--command: workloads as model:policy:prompt_tokens:new_tokens[:threads[:depth]] "
        "separated by ';' (at least 4: every third is held out); threads and depth fill "
        "{threads} and {depth}; policy as-stored: a GGUF model's own tensor types. "
        "--backend executorch: PROGRAM.pte:PROMPT:NEW[:THREADS] (the program's manifest names "
        "its model and policy; threads: ExecuTorch's threadpool, 0 its default)",
    )
    p.add_argument(
        "--held-out",
        metavar="FILE",
        help="--backend executorch: workloads written down before they run (one "
        "PROGRAM.pte:PROMPT:NEW[:THREADS] a line, '#' comments, paths from the current folder), "
        "run interleaved with --workloads in one session and scored only; every --workloads "
        "item is then fitted (none held out by position)",
    )
    p.add_argument(
        "--profile",
        help="--command, --backend executorch: the SoC profile the runs ran on (default: a "
        "--session's profile; --backend executorch: this machine's own, measured and written "
        "as OUT.soc.toml; "
        "else, for --parser llama-bench, this machine's own, measured and written as "
        "OUT.soc.toml; else harmony-flagship, whose efficiencies are fitted without --runtime)",
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
        "--quick",
        action="store_true",
        help="runs: 6 of the 10 runs, 3 repeats (a few minutes); microbench: fewer sizes and "
        "one held-out workload",
    )
    p.add_argument(
        "--repeats",
        type=_positive_int,
        help="timed repeats per run or microbenchmark (default 5; runs --quick 3; "
        "--backend executorch 3)",
    )
    p.add_argument(
        "--threads",
        type=_positive_int,
        help="--method microbench: Numba and BLAS threads (default 1: on a shared machine a "
        "preempted worker thread stalls a parallel kernel for a scheduler slice; the runs "
        "method's plan sets each run's threads)",
    )
    p.add_argument(
        "--stat",
        choices=("min", "median"),
        help="--method microbench: time per op used to fit and score: min (default: the "
        "least disturbed repeat on a shared machine) or median",
    )
    p.add_argument(
        "--launch-from-workloads",
        action="store_true",
        help="--method microbench: refit the launch overhead on the phase totals of a few "
        "whole-model fit workloads (the real op mix) instead of taking it from the "
        "microbenchmarks",
    )
    p.add_argument(
        "--no-e2e",
        action="store_true",
        help="--method microbench: skip the held-out whole-model runs",
    )
    p.add_argument(
        "--set",
        dest="fit_set",
        choices=("host", "llama.cpp", "phones"),
        help="fit a runtime profile (--runtime) on the fit points of a measured set "
        "(the committed host runs, llama-bench runs, or published figures) and "
        "write it to --out",
    )
    p.add_argument(
        "--runtime",
        help="--set / --command / --backend executorch: the runtime profile to fit (name or "
        "path; --command on this host with --parser llama-bench: llama.cpp-host by default; "
        "--backend executorch: executorch-xnnpack)",
    )
    p.add_argument(
        "--figures",
        metavar="TOML",
        help="--set phones: a file of published figures (default the shipped ones)",
    )
    p.add_argument(
        "--params",
        help="--set, --command with a runtime: comma-separated parameters to fit "
        "(e.g. matmul,memory; --command defaults: matmul,memory,launch_us on a phone profile, "
        "matmul,gemv,attention_decode,launch_us on this host)",
    )
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

    from harmony_ref.calibrate import run as calibrate

    check_output_file(args.out, "--out")  # before minutes of measuring
    if not args.name.strip():  # a blank name fell back to a temporary file's path
        raise ValueError(f"--name {args.name!r}: give the profile a name")
    if args.session and args.backend != "command":
        raise ValueError("--session applies to --backend command")
    _refuse_idle_flags(args)
    if args.figures and not args.fit_set:
        raise ValueError(f"--figures {args.figures}: applies to --set phones")
    if args.fit_set:
        return _run_set_calibration(args)
    if args.backend == "host" and args.method == "runs":
        return _run_host_runs(args)
    if args.backend == "executorch":
        return _run_executorch(args)
    if args.backend == "command" and (args.command_template or args.session):
        return _run_phase_calibration(args)
    if args.backend == "command":
        if not args.ops:
            raise ValueError(
                "--backend command needs --ops CSV (op times measured on the device) "
                "or --command/--parser/--workloads (phase times from repeated runs)"
            )
        result, summary = calibrate.calibrate_op_file(
            args.ops, args.out, args.name, args.stream_gbps, args.stat or "min"
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
                args.repeats or 5,
                args.threads or 1,
                args.stat or "min",
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


MICROBENCH_ONLY = (
    ("threads", "--threads"),
    ("stat", "--stat"),
    ("launch_from_workloads", "--launch-from-workloads"),
    ("no_e2e", "--no-e2e"),
)


COMMAND_ONLY = (
    ("ops", "--ops"),
    ("command_template", "--command"),
    ("parser", "--parser"),
    ("workloads", "--workloads"),
    ("runtime", "--runtime"),
    ("stream_gbps", "--stream-gbps"),
)


EXECUTORCH_IDLE = (
    *MICROBENCH_ONLY,
    ("ops", "--ops"),
    ("command_template", "--command"),
    ("parser", "--parser"),
    ("stream_gbps", "--stream-gbps"),
    ("quick", "--quick"),
    ("fit_set", "--set"),
    ("figures", "--figures"),
)


def _refuse_idle_flags(args) -> None:
    """A flag that does nothing in the chosen mode is refused, not ignored."""
    if args.backend == "executorch":
        for attr, flag in EXECUTORCH_IDLE:
            if getattr(args, attr):
                raise ValueError(f"{flag} does not apply to --backend executorch")
    if args.held_out and args.backend != "executorch":
        raise ValueError(f"--held-out {args.held_out}: applies to --backend executorch")
    host_runs = args.backend == "host" and args.method == "runs" and not args.fit_set
    if args.params and not (args.fit_set or args.backend in ("command", "executorch")):
        raise ValueError(
            f"--params {args.params}: applies to --set or --backend command / executorch"
        )
    if host_runs:
        for attr, flag in MICROBENCH_ONLY:
            if getattr(args, attr):
                raise ValueError(f"{flag} applies to --method microbench, not --method runs")
        for attr, flag in COMMAND_ONLY:
            if getattr(args, attr):
                raise ValueError(f"{flag} applies to --backend command or --set")
    elif args.model:
        raise ValueError("--model applies to --backend host --method runs")
    if args.method != "runs" and args.backend != "host":
        raise ValueError("--method applies to --backend host")


def _run_host_runs(args) -> int:
    """`calibrate --backend host` (the runs method): calibrate/host.py."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from harmony_ref.calibrate.host import calibrate_host_runs, plan_runs
    from harmony_ref.calibrate.host_runs import load_host_manifest

    plan = plan_runs(load_host_manifest(), args.quick)  # outputs: checked before any run there
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as prog:
        task = prog.add_task("calibrating", total=len(plan) + 2)

        def report(label: str) -> None:
            prog.update(task, description=label)
            if not label.endswith("per-call profile"):
                prog.advance(task)

        summary = calibrate_host_runs(
            args.out, args.name, args.model or "", args.quick, args.repeats, progress=report
        )
    if args.json:
        print_json(summary)
        return 0
    import pandas as pd

    print_table(
        pd.DataFrame(summary["runs"]),
        title=f"{summary['model']} on {summary['cpu']}: measured vs the fitted model",
    )
    for k, v in summary.items():
        if k not in ("runs", "machine"):
            print(f"{k}: {v}")
    return 0


def _run_executorch(args) -> int:
    """`calibrate --backend executorch`: calibrate/executorch.py."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from harmony_ref.calibrate.executorch import RUNTIME, calibrate_executorch
    from harmony_ref.device.runtime import load_runtime
    from harmony_ref.device.soc import load_soc
    from harmony_ref.lab.errors import BackendError
    from harmony_ref.runtime.pte import require_executorch

    require_executorch()
    from harmony_ref.calibrate.executorch import parse_program_workloads, read_held_out_workloads

    # every program read before any run
    if args.held_out and not Path(args.held_out).is_file():
        raise ValueError(f"--held-out {args.held_out}: no such file")
    held = read_held_out_workloads(args.held_out) if args.held_out else ()
    workloads = parse_program_workloads(args.workloads, minimum=1 if held else 4)
    from harmony_ref.calibrate.executorch import check_workloads_disjoint

    check_workloads_disjoint(workloads, held)
    runtime = args.runtime or RUNTIME
    load_runtime(runtime)
    if args.profile:
        load_soc(args.profile)
    params = _params(args.params)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    try:
        with Progress(*columns, console=Console(stderr=True), transient=True) as prog:
            runs = len(workloads) + len(held)
            task = prog.add_task("this machine's microbenchmarks", total=runs + 1)  # + the fit

            def report(label: str) -> None:
                prog.update(task, description=label)
                prog.advance(task)

            rows, table, summary = calibrate_executorch(
                workloads,
                args.out,
                args.name,
                args.profile or "",
                runtime,
                params,
                args.repeats or 3,
                report,
                held,
            )
    except BackendError as e:
        print(error_line("calibrate", e), file=sys.stderr)
        return 1
    if args.json:
        print_json({**summary, "phases": table, "rows": rows})
        return 0
    import pandas as pd

    print_table(pd.DataFrame(table), title="ExecuTorch phase times: measured vs the fitted runtime")
    for k, v in summary.items():
        print(f"{k}: {v}")
    return 0


def _parse_workloads(text: str) -> list[tuple]:
    """model:policy:prompt:new[:threads[:depth]] items separated by ';' (at least 4)."""
    out = []
    for item in (text or "").split(";"):
        if not item.strip():
            continue
        parts = item.strip().split(":")
        if not 4 <= len(parts) <= 6:
            raise ValueError(
                f"--workloads item {item!r}: expected "
                "model:policy:prompt_tokens:new_tokens[:threads[:depth]]"
            )
        try:
            nums = [int(x) for x in parts[2:]]
        except ValueError as e:
            raise ValueError(f"--workloads item {item!r}: {e}") from e
        floors = (1, 1, 0, 0)  # prompt, new >= 1; threads (0: the runtime's), depth >= 0
        bad = next((n for n, lo in zip(nums, floors) if n < lo), None)
        if bad is not None:
            raise ValueError(f"--workloads item {item!r}: {bad} is out of range")
        out.append((parts[0], parts[1], *nums))
    if len(out) < 4:
        raise ValueError(
            f"--workloads: need at least 4 (3 to fit, every third held out), got {len(out)}"
        )
    return out


def _run_phase_calibration(args) -> int:
    """Phase-level calibration from a benchmark command: a runtime profile on a SoC
    (calibrate/phases.py; on this host by default for llama-bench) or, without --runtime, a
    device profile's efficiencies (calibrate/run.py calibrate_phases)."""
    from harmony_ref.commands import _session
    from harmony_ref.lab.errors import BackendError
    from harmony_ref.lab.transport import DeviceGone

    session = _session.load(args.session)
    command = args.command_template or (session.benchmark.command if session else "")
    fmt = args.parser or (session.benchmark.format if session else "")
    if not command:
        raise ValueError(
            "--backend command needs --command (or a --session with a benchmark command)"
        )
    if not fmt:
        raise ValueError("--command needs --parser")
    workloads = _parse_workloads(args.workloads)
    profile = args.profile or (session.device.profile if session else "") or ""
    on_host = not profile and not session
    runtime = args.runtime or (HOST_BENCH_RUNTIME if on_host and fmt == "llama-bench" else "")
    params = _params(args.params)
    if not runtime and (params or any(len(w) > 4 and any(w[4:]) for w in workloads)):
        raise ValueError(
            "--params and workload threads/depth apply to a runtime calibration (--runtime)"
        )
    try:
        progress = _session.progress(args.json) if session else None
        timeout = None if session else args.timeout
        if runtime:
            table, summary = _runtime_phases(
                args, command, fmt, workloads, profile, runtime, timeout, params, session, progress
            )
        else:
            from harmony_ref.calibrate.run import calibrate_phases
            from harmony_ref.config import DEFAULT_PROFILE

            table, summary = calibrate_phases(
                command,
                fmt,
                [w[:4] for w in workloads],
                profile or DEFAULT_PROFILE,
                timeout,
                args.out,
                args.name,
                session=session,
                progress=progress,
            )
    except DeviceGone as e:
        return _session.gone_exit(NAME, e)
    except BackendError as e:
        print(error_line("calibrate", e), file=sys.stderr)
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


def _params(text: str | None) -> tuple[str, ...] | None:
    """--params as a tuple, every name checked before any run."""
    from harmony_ref.calibrate.fit_runtime import PARAMS

    if not text:
        return None
    names = tuple(p.strip() for p in text.split(","))
    bad = [n for n in names if n not in PARAMS]
    if bad:
        raise ValueError(f"--params: unknown parameter(s) {bad}; known {list(PARAMS)}")
    return names


HOST_BENCH_RUNTIME = "llama.cpp-host"  # llama-bench on this host, with no --runtime given


def _runtime_phases(args, command, fmt, workloads, profile, runtime, timeout, params, *rest):
    """calibrate/phases.py on `profile`, or (no profile, no session) on this host's own SoC
    profile, measured first and written beside --out as OUT.soc.toml once the fit succeeded."""
    from harmony_ref.calibrate.phases import HOST_PHASE_PARAMS, calibrate_runtime_phases

    session, progress = rest
    if profile:
        return calibrate_runtime_phases(
            command, fmt, workloads, profile, runtime, timeout, args.out, params, session, progress
        )
    from harmony_ref.calibrate.host import on_measured_host_soc

    def fit(soc_path: str, soc_label: str):
        return calibrate_runtime_phases(
            command,
            fmt,
            workloads,
            soc_path,
            runtime,
            timeout,
            args.out,
            params or HOST_PHASE_PARAMS,
            None,
            progress,
            profile_label=soc_label,
        )

    written_by = "microbenchmarks of `harmony-ref calibrate --backend command`"
    (table, summary), soc_out = on_measured_host_soc(args.out, args.name, written_by, fit)
    summary["profile"] = str(soc_out)
    summary["profile_measured"] = "this machine (its microbenchmarks, before the runs)"
    return table, summary


def _run_set_calibration(args) -> int:
    from harmony_ref.calibrate.run import calibrate_runtime_on_set

    if not args.runtime:
        raise ValueError("--set needs --runtime (the runtime profile to fit)")
    if args.figures and args.fit_set != "phones":
        raise ValueError(f"--figures {args.figures}: applies to --set phones, not {args.fit_set}")
    params = _params(args.params)
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
    held = summary["held_out_mape_pct"]
    print(
        f"held_out_mape_pct: {held} (over the {len(summary['scored_on'])} scored_on points)"
        if held is not None and held == held
        else "held_out_mape_pct: not scored (no split 'score' points: nothing held out)"
    )
    return 0
