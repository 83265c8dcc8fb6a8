"""`harmony-ref measure`: run a benchmark command once and print the metrics parsed from it; with
`--session FILE`, run it through a device session (transport, pushes, cooldown, warm-up,
repeats, telemetry, throttled repeats left out) and write a run record.

Exit codes: 0 measured, 1 the measurement failed (timeout, crash, garbage, a phone that never
cooled) or too few repeats ran unthrottled (the record is kept, the gate refuses it), 2 bad
input or a device that disappeared mid-session (nothing recorded)."""

from __future__ import annotations

import sys

from harmony_ref.commands._output import add_json_flag, print_json, print_table

NAME = "measure"
HELP = (
    "run an external benchmark command (e.g. over hdc/adb shell, or through a device "
    "session) and print its parsed metrics"
)


def add_arguments(p) -> None:
    from harmony_ref.commands._args import (
        add_history_arguments,
        add_renamed,
        add_scenario_arguments,
        number,
    )
    from harmony_ref.commands._session import add_session_argument
    from harmony_ref.lab.parsers import OUTPUT_FORMATS

    p.add_argument(
        "--command",
        dest="command_template",
        metavar="CMD",
        help="command to run; placeholders {name} filled from --set name=value "
        "(with --session: default the session's benchmark.command, and "
        "{work_dir}, {python} are known)",
    )
    add_renamed(
        p,
        "--parser",
        choices=OUTPUT_FORMATS,
        help="parser of the command's output (with --session: default the session's)",
    )
    p.add_argument(
        "--timeout",
        type=number(0, above=True),
        default=None,
        metavar="S",
        help="kill the command (and its children) after S seconds (default 600, or "
        "the session's benchmark.timeout_s)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="value for a {NAME} placeholder in the command (repeatable)",
    )
    add_session_argument(p)
    p.add_argument(
        "--out-dir",
        default="results/runs",
        help="with --session: where the run record goes (default results/runs)",
    )
    p.add_argument("--no-record", action="store_true", help="with --session: write no record")
    add_history_arguments(p)
    g = p.add_argument_group(
        "physics sanity (flag measurements faster than the profile's roofline)"
    )
    g.add_argument(
        "--profile",
        help="device profile to check against (name or .toml path; "
        "default the session's device.profile)",
    )
    g.add_argument(
        "--model",
        help="model the command runs (required with --profile; default "
        "the session's benchmark.model)",
    )
    g.add_argument(
        "--policy",
        default=None,
        help="quantization policy it runs (default the session's, else int4-g128)",
    )
    add_scenario_arguments(g, long_dest=True)
    p.set_defaults(prompt_tokens=None, new_tokens=None)  # None: not given (run() fills them)
    from harmony_ref.commands._args import add_allow_unmatched

    add_allow_unmatched(p)
    add_json_flag(p)


def _values(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--set {pair!r}: expected NAME=VALUE")
        out[name] = value
    return out


def _config(args, session):
    """The RunConfig the measurement is of (None without a model), and the profile to check."""
    from harmony_ref.config import RunConfig
    from harmony_ref.device.runtime import load_profile
    from harmony_ref.runtime.loader import resolve_model

    bench = session.benchmark if session else None
    model = args.model or (bench.model if bench else "")
    policy = args.policy or (bench.policy if bench and bench.policy else "int4-g128")
    profile_name = args.profile or (session.device.profile if session else "")
    profile = load_profile(profile_name) if profile_name else None
    if args.profile and not model:
        raise ValueError(
            "--profile needs --model (the model the command runs) for the roofline bound"
        )
    if not model:
        return None, profile
    spec, checkpoint = resolve_model(model)
    where = profile_name or (
        f"{session.transport}:{session.device.serial or 'host'}" if session else "unspecified"
    )
    config = RunConfig.from_names(
        model=spec,
        policy=policy,
        prompt_tokens=args.prompt_tokens,
        new_tokens=args.new_tokens,
        context_tokens=args.context_tokens,
        profile=where,
        backend="command",
        checkpoint=checkpoint,
        allow_unmatched=args.allow_unmatched,
    )
    return config, profile


def run(args) -> int:
    from harmony_ref.backends.command import CommandDevice
    from harmony_ref.commands import _session
    from harmony_ref.commands._args import DEFAULT_NEW_TOKENS, DEFAULT_PROMPT_TOKENS
    from harmony_ref.lab.errors import BackendError
    from harmony_ref.lab.transport import DeviceGone

    given = (("--prompt", args.prompt_tokens), ("--new", args.new_tokens))
    asked = [flag for flag, v in given if v is not None]  # the flags the user gave
    if args.prompt_tokens is None:
        args.prompt_tokens = DEFAULT_PROMPT_TOKENS
    if args.new_tokens is None:
        args.new_tokens = DEFAULT_NEW_TOKENS
    session = _session.load(args.session)
    if session is None:
        if not args.command_template or not args.parser:
            raise ValueError("give --command and --parser (or --session FILE)")
    elif not args.no_record:
        from harmony_ref._io import check_output_dir
        from harmony_ref.commands._args import open_history_arguments

        check_output_dir(args.out_dir, "--out-dir")
        args.history_store, args.sut_info = open_history_arguments(args, args.out_dir, session)
    config, profile = _config(args, session)
    dev = CommandDevice(
        args.command_template,
        args.parser,
        args.timeout,
        values=_values(args.set),
        profile=profile,
        session=session,
        progress=_session.progress(args.json) if session else None,
    )
    dev.command_for(config)  # a missing placeholder is bad input now, before any work
    try:
        m = dev.run(config)
    except DeviceGone as e:
        return _session.gone_exit(NAME, e, args.verbose)
    except BackendError as e:
        return _session.error_exit(NAME, e, 1, args.verbose)
    metrics, findings = m.metrics, list(m.findings)
    if config is not None and m.config is not None and m.config.scenario != config.scenario:
        s, want = m.config.scenario, config.scenario
        if asked:  # only a flag the user gave can disagree with what ran
            print(
                f"note: the command ran {s.prompt_tokens} prompt / {s.new_tokens} new tokens "
                f"(its own output says so), not the {want.prompt_tokens} / {want.new_tokens} of "
                f"{' / '.join(asked)}: the record and the physics check take what ran",
                file=sys.stderr,
            )
        config = m.config
    path = None
    if session is not None and not args.no_record:
        path = _write_record(m, config, dev, args)
    if args.json:
        print_json(
            {
                "backend": "command",
                "metrics": metrics.to_dict(),
                "provenance": m.provenance,
                "implausible": findings,
                "session": m.session,
                "record": str(path) if path else None,
            }
        )
    else:
        print_table(metrics.to_frame(), title=f"measured ({dev.format})")
        for k, v in m.provenance.items():
            print(f"  {k}: {v}")
        for f in findings:
            print(f"IMPLAUSIBLE: {f}")
        if m.session is not None:
            _session.print_block(m.session)
        if path is not None:
            print(f"record: {path}")
    if m.session is not None and m.session["valid_repeats"] < m.session["min_valid_repeats"]:
        print(
            f"harmony-ref measure: only {m.session['valid_repeats']} of "
            f"{m.session['repeats']} repeats ran unthrottled (the session asks for "
            f"{m.session['min_valid_repeats']}): not a result the gate will take",
            file=sys.stderr,
        )
        return 1
    return 0


def _write_record(m, config, dev, args):
    """A run record of a session measurement: the config (or what the command says it runs),
    the metrics, the session block in its `session` part. The config names the session by
    what it measured (session_id), not by its file, which the session block keeps."""
    from harmony_ref.lab.session_result import session_id
    from harmony_ref.track.record import Record, collect_provenance, write_record

    opts = {
        "command": dev.command_template,
        "format": dev.format,
        "transport": dev.session.transport,
        "device": f"{m.session['transport']}:{m.session['serial']}",
    }
    if config is not None:
        cfg = config.to_dict()
        cfg["backend_options"] = opts
    else:
        cfg = {
            "model": "unspecified",
            "policy": "unspecified",
            "profile": dev.session.device.profile
            or f"{dev.session.transport}:{dev.session.device.serial or 'host'}",
            "backend": "command",
            "scenario": {
                "prompt_tokens": args.prompt_tokens,
                "new_tokens": args.new_tokens,
                "context_tokens": args.context_tokens,
                "batch": 1,
            },
            "backend_options": opts,
        }
    opts["session_id"] = session_id(m.session, cfg["model"], cfg["policy"], cfg["scenario"])
    part = {
        "status": "ok",
        "detail": f"{len(m.metrics)} metrics from "
        f"{m.session['valid_repeats']} valid of {m.session['repeats']} repeats",
        "metrics": m.metrics.names(),
        "backend_provenance": dict(m.provenance),
        "physics": m.physics,
        "implausible": list(m.findings),
        "session": m.session,
    }
    prov = collect_provenance()
    record = Record(cfg, m.metrics, prov, {"session": part})
    return write_record(record, args.out_dir, args.history_store, args.sut_info)
