"""`harmony-ref run`: the main job. Measures one config in six parts (predicted metrics, host
kernel timings, accuracy on real weights, cold start, 10-minute thermal summary, fidelity: the
device model's error against real runs; job/main.py), prints one table, writes a run record
under results/runs/ and appends it to the run history."""

from __future__ import annotations

from harmony_ref.commands._args import MODEL_DEFAULT, POLICY_DEFAULT
from harmony_ref.config import DEFAULT_PROFILE

NAME = "run"
HELP = "measure one config (predicted, host kernels, accuracy, cold start, thermal) and write a run record"

DEFAULTS = {
    "model": MODEL_DEFAULT,
    "policy": POLICY_DEFAULT,
    "profile": DEFAULT_PROFILE,
    "backend": "simulated",
}


def add_config_arguments(p) -> None:
    from harmony_ref.commands._args import add_model_arguments, add_runtime_argument

    add_model_arguments(
        p,
        model=DEFAULTS["model"],
        policy=DEFAULTS["policy"],
        profile=DEFAULTS["profile"],
        checkpoints=True,
        model_help="the host backend runs it, accuracy scores it",
    )
    add_runtime_argument(p)
    p.add_argument(
        "--backend",
        default=DEFAULTS["backend"],
        choices=("simulated", "host", "command", "executorch"),
        help="backend for the device metrics (default simulated); executorch runs --model "
        "FILE.pte (export --format pte) on this CPU",
    )
    p.add_argument(
        "--command",
        help="with --backend command: the benchmark command to run (e.g. over hdc shell)",
    )
    p.add_argument(
        "--command-format",
        help="with --backend command: its output format "
        "(mslite, tflite, llama-bench, executorch, ...)",
    )
    p.add_argument(
        "--session",
        metavar="FILE",
        help="with --backend command: run it through a device session (transport, "
        "pushes, cooldown, repeats, telemetry, throttled repeats left out); its "
        "benchmark command and format are the default",
    )
    from harmony_ref.commands._args import add_scenario_arguments, count

    add_scenario_arguments(p, batch=1, long_dest=True)
    p.add_argument(
        "--prefix-tokens",
        type=count(0),
        default=0,
        metavar="N",
        help="of the prompt, already in the KV cache (prefix reuse; default 0)",
    )
    from harmony_ref.commands._args import add_allow_unmatched

    add_allow_unmatched(p)


def config_from_args(args):
    """The RunConfig the arguments describe (names resolved now: a bad one is exit 2)."""
    from harmony_ref.config import RunConfig

    for key in ("prompt_tokens", "new_tokens", "context_tokens", "batch"):
        lo = 0 if key == "new_tokens" else 1
        if getattr(args, key) < lo:
            raise ValueError(
                f"--{key.replace('_', '-')} must be an integer >= {lo}, got {getattr(args, key)}"
            )
    opts = None
    session = getattr(args, "session", None)
    if args.backend == "command":
        from harmony_ref._format import did_you_mean
        from harmony_ref.lab.parsers import OUTPUT_FORMATS

        command, fmt = args.command, args.command_format
        if session:
            from harmony_ref.lab.session_spec import load_session

            spec = load_session(session)  # bad input is exit 2 now, before any part runs
            command, fmt = command or spec.benchmark.command, fmt or spec.benchmark.format
        if not (command and fmt):
            raise ValueError(
                "--backend command needs --command and --command-format (or a "
                "--session whose benchmark has them)"
            )
        if fmt not in OUTPUT_FORMATS:
            raise ValueError(
                f"--command-format {fmt!r}: unknown output format"
                f"{did_you_mean(fmt, OUTPUT_FORMATS)}; formats are " + ", ".join(OUTPUT_FORMATS)
            )
        opts = {"command": command, "format": fmt}
        if session:
            opts["session"] = str(session)
    elif args.command or args.command_format or session:
        raise ValueError("--command/--command-format/--session only apply to --backend command")
    from harmony_ref.device.runtime import load_profile
    from harmony_ref.runtime.loader import resolve_model

    model_arg, policy = args.model, args.policy
    if args.backend == "executorch":
        from harmony_ref.backends.executorch import program_config

        model_arg, policy, opts = program_config(args.model, args.policy, DEFAULTS["policy"], args)
    elif args.model.endswith(".pte"):
        raise ValueError(
            f"--model {args.model}: an ExecuTorch program runs with --backend executorch"
        )
    model, checkpoint = resolve_model(model_arg)
    config = RunConfig.from_names(
        model,
        policy,
        args.prompt_tokens,
        args.new_tokens,
        args.context_tokens,
        args.batch,
        profile=args.profile,
        backend=args.backend,
        backend_options=opts,
        prefix_tokens=args.prefix_tokens,
        checkpoint=checkpoint,
        allow_unmatched=args.allow_unmatched,
        runtime=args.runtime or "",
    )
    # a bad profile, or a runtime whose unit the SoC lacks, is exit 2 now, not a failed part later
    load_profile(args.profile, args.runtime)
    return config


def add_arguments(p) -> None:
    from harmony_ref.commands._args import add_history_arguments
    from harmony_ref.commands._output import add_json_flag
    from harmony_ref.job.main import part_names

    add_config_arguments(p)
    p.add_argument(
        "--skip",
        default="",
        metavar="PARTS",
        help=f"comma-separated parts to skip: {','.join(part_names())}",
    )
    p.add_argument(
        "--out-dir", default="results/runs", help="where the record goes (default results/runs)"
    )
    p.add_argument("--no-record", action="store_true", help="do not write a record")
    add_history_arguments(p)
    add_json_flag(p)


def record_frame(record):
    """One row per metric: value, unit, better, kind, the part that made it, flags."""
    from harmony_ref.job.main import metric_parts

    owner = metric_parts(record)
    df = record.metrics.to_frame()
    df.insert(1, "part", [owner.get(n, "") for n in df["metric"]])
    return df


def print_record(record, path=None, file=None) -> None:
    import sys

    from harmony_ref.commands._output import print_table

    out = file or sys.stdout
    c = record.config
    sc = c["scenario"]
    title = (
        f"{c['model']} / {c['policy']} / {c['profile']} ({c['backend']}), "
        f"{sc['prompt_tokens']} prompt + {sc['new_tokens']} new tokens, context {sc['context_tokens']}, "
        f"batch {sc['batch']}"
    )
    pred = record.parts.get("predicted", {})
    if pred.get("measured_model"):  # on its own line: a table title would wrap it mid-word
        print(
            f"MEASURED ON A SCALED COPY {pred['measured_model']} of {c['model']} "
            f"({pred['measured_weights_mb']:,.0f} MB of weights instead of "
            f"{pred['model_weights_mb']:,.0f}): the device metrics are of the smaller model",
            file=out,
        )
    if len(record.metrics):
        print_table(record_frame(record), title=title, file=out)
    else:
        print(f"{title}: no metrics", file=out)
    for name, p in record.parts.items():
        print(f"  {name:<10} {p['status']:<12} {p.get('detail', '')}", file=out)
        if p.get("note"):  # what the part's numbers are of (the fidelity fixtures' machine)
            print(f"  {'':<10} {'':<12} {p['note']}", file=out)
    if path is not None:
        print(f"record: {path}", file=out)


def run(args) -> int:
    from harmony_ref._io import check_output_dir
    from harmony_ref.commands._output import print_json
    from harmony_ref.job.main import parse_skip, run_job
    from harmony_ref.track.record import write_record

    config = config_from_args(args)
    skip = parse_skip(args.skip)
    if not args.no_record:
        from harmony_ref.commands._args import open_history_arguments

        check_output_dir(args.out_dir, "--out-dir")
        from harmony_ref.commands._session import load

        history, sut = open_history_arguments(
            args, args.out_dir, load(getattr(args, "session", None))
        )
    from harmony_ref.lab.transport import DeviceGone

    try:
        record = run_job(config, skip=skip, show_progress=True)  # on stderr
    except DeviceGone as e:
        from harmony_ref.commands._session import gone_exit

        return gone_exit(NAME, e)
    path = None if args.no_record else write_record(record, args.out_dir, history, sut)
    if args.json:
        print_json({"record": str(path) if path else None, **record.to_dict()})
    else:
        print_record(record, path)
    failed = [n for n, p in record.parts.items() if p["status"] == "failed"]
    block = record.parts.get("predicted", {}).get("session")
    if block is not None:
        import sys

        from harmony_ref.commands._session import print_block

        print_block(block, file=sys.stderr if args.json else None)
        if block["valid_repeats"] < block["min_valid_repeats"]:
            print(
                f"note: only {block['valid_repeats']} of {block['repeats']} repeats ran "
                f"unthrottled (the session asks for {block['min_valid_repeats']}): the gate "
                "will refuse this record",
                file=sys.stderr,
            )
            return 1
    if path is not None and path.parent.name == "failed":
        import sys

        print(
            f"note: no part succeeded; the record is kept in {path.parent}, where "
            "`gate --current latest` does not look",
            file=sys.stderr,
        )
    return 1 if failed else 0
