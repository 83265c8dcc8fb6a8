"""`harmony-ref check-runtime`: is the runtime under test still computing the model? Runs a command
template on harmony-ref's corpus (on the host, or on a phone over `hdc shell`), compares its
perplexity with harmony-ref's FP32 reference for the same model, text and context (or judges
MindSpore Lite's comparison with the calibration outputs), flags it `inaccurate` beyond the bound
derived in job/runtime_check.py, writes a run record, and prints speed beside accuracy.

`--model FILE.pte`: an ExecuTorch program (`export --format pte`) harmony-ref runs and scores
itself, no template: the same verdict, with our kernels under the program's policy beside it
(job/runtime_check_program.py).

Exit codes: 0 every runtime accurate, 1 one or more flagged inaccurate, 2 bad input (template,
placeholder, command not found, timeout, output not the format, a record that is not one). With
several --command, one that fails is an "error" row (no record) and the others still run.
"""

from __future__ import annotations

import sys

from harmony_ref._format import error_line

NAME = "check-runtime"
HELP = (
    "check that a runtime still computes the model (perplexity vs harmony-ref's FP32 "
    "reference, or MindSpore Lite's cosine / mean bias); speed beside accuracy"
)


def add_arguments(p) -> None:
    from harmony_ref.commands._args import (
        add_checkpoint_argument,
        add_renamed,
        add_scoring_arguments,
        number,
    )
    from harmony_ref.commands._output import add_json_flag
    from harmony_ref.job.runtime_check import CHECK_FORMATS, DEFAULT_CONTEXT, DEFAULT_EXPECT

    p.add_argument(
        "--command",
        dest="commands",
        action="append",
        default=[],
        metavar="TEMPLATE",
        help="command template with {model} {corpus} {context} {chunks} (repeatable: "
        "one row each, e.g. two builds of one runtime)",
    )
    p.add_argument(
        "--label",
        action="append",
        default=[],
        help="name of each --command in the table (in order; default cmd1, cmd2, ...)",
    )
    p.add_argument(
        "--compare",
        nargs="+",
        metavar="RECORD",
        help="print the table from check-runtime records instead of running anything",
    )
    add_checkpoint_argument(
        p,
        extra="the model the runtime runs (the reference is computed "
        "from it); for mslite, any text; or FILE.pte (export --format pte, the executorch "
        "extra): the ExecuTorch program run and scored by harmony-ref itself, no --command",
    )
    add_scoring_arguments(p, context=DEFAULT_CONTEXT)
    p.add_argument(
        "--corpus",
        default=None,
        metavar="FILE",
        help="score this UTF-8 text file (wikitext, your app's prompts) instead of "
        "the shipped held-out corpus (read up to its first 4 MB, tokenized only as far as "
        "--chunks needs); the runtime's {corpus} is a copy of what is read",
    )
    add_renamed(
        p,
        "--parser",
        default="llama-perplexity",
        choices=CHECK_FORMATS,
        help="parser of the runtime's output (default llama-perplexity)",
    )
    p.add_argument(
        "--expect",
        default=None,
        metavar="POLICY",
        help="arithmetic a correct runtime may use, measured by harmony-ref to derive "
        f"the bound (default {DEFAULT_EXPECT}, and for a .pte its own policy; e.g. int4-g32 "
        "if it re-quantizes; as-stored: a GGUF file's tensors exactly as stored)",
    )
    p.add_argument(
        "--device",
        default="host",
        help="where the runtime runs, a label for the record (default host)",
    )
    p.add_argument(
        "--timeout",
        type=number(0, above=True),
        default=3600.0,
        metavar="S",
        help="kill each command (and its children) after S seconds (default 3600)",
    )
    from harmony_ref.commands._session import add_session_argument

    add_session_argument(p)
    p.add_argument(
        "--out-dir", default="results/runs", help="where the run records go (default results/runs)"
    )
    p.add_argument(
        "--no-cache", action="store_true", help="recompute the FP32 reference even when cached"
    )
    add_json_flag(p)


def _print_rows(rows, title):
    import pandas as pd

    from harmony_ref.commands._output import print_table

    cols = [
        "runtime",
        "speed",
        "perplexity",
        "ppl_ratio",
        "bound",
        "vs_harmony_ref",
        "cosine",
        "verdict",
    ]
    df = pd.DataFrame(rows)
    keep = [c for c in cols if c in df and (c in ("runtime", "verdict") or (df[c] != "-").any())]
    print_table(df[keep], title=title)


def _compare(args) -> int:
    from harmony_ref.commands._output import print_json
    from harmony_ref.job.runtime_check_judge import row_from_record
    from harmony_ref.track.record import load_record

    rows = [row_from_record(load_record(path), path) for path in args.compare]
    if args.json:
        print_json({"rows": rows})
    else:
        _print_rows(rows, "speed and accuracy, from records")
    return 1 if any(r["verdict"] != "accurate" for r in rows) else 0


def run(args) -> int:
    from harmony_ref.commands._output import print_json

    if args.compare:
        if args.commands:
            raise ValueError("--compare reads records; give it no --command")
        return _compare(args)
    if args.model.endswith(".pte"):
        ref, runs = _run_program(args)
    else:
        if args.expect is None:
            from harmony_ref.job.runtime_check import DEFAULT_EXPECT

            args.expect = DEFAULT_EXPECT
        got = _run_commands(args)
        if isinstance(got, int):  # the device left mid-session
            return got
        ref, runs = got
    out, errors, rows = runs.done, runs.errors, runs.rows()
    if args.json:
        print_json(
            {
                "reference": ref.to_dict() if ref else None,
                "runs": [
                    {
                        "label": c.label,
                        "command": r.command,
                        "verdict": r.verdict,
                        "reasons": r.reasons,
                        "record": str(p),
                        "metrics": r.metrics.to_dict(),
                        "provenance": r.provenance,
                        "session": r.session,
                    }
                    for c, r, p in out
                ],
                "errors": [{"label": c.label, "error": e} for c, e in errors],
                "rows": rows,
            }
        )
    else:
        _print_rows(rows, "speed and accuracy")
        for c, r, p in out:
            for reason in r.reasons:
                print(f"INACCURATE {c.label}: {reason}")
            if r.session is not None:
                from harmony_ref.commands import _session

                _session.print_block(r.session)
            print(f"record: {p}")
    if errors:
        return 2
    return 0 if runs.all_accurate() else 1


def _reference_progress(args, work):
    """work(progress) under a progress bar on stderr (chunks done / total), then the reference
    and the bound printed (not with --json); returns the Reference, or (Reference, more)."""
    from rich.console import Console
    from rich.progress import Progress

    with Progress(
        console=Console(stderr=True),
        transient=True,
        disable=args.json or not sys.stderr.isatty(),
    ) as bar:
        task = bar.add_task("FP32 reference perplexity", total=None)
        got = work(lambda done, total: bar.update(task, completed=done, total=total))
    ref = got[0] if isinstance(got, tuple) else got
    if not args.json:
        cached = " (cached)" if ref.cached else ""
        print(
            f"reference: FP32 perplexity {ref.ppl:.4f} over {ref.chunks} chunks of "
            f"{ref.context} ({ref.scored_tokens} scored tokens){cached}"
        )
        print(f"bound: {ref.bound.how()}")
        what = (
            "the file as stored"
            if ref.bound.expect == "as-stored"
            else f"with --expect {ref.bound.expect}"
        )
        print(f"harmony-ref, {what}: perplexity {ref.ppl * ref.bound.expected_ratio:.4f}")
    return got


def _run_program(args):
    """check-runtime --model FILE.pte: (Reference, CheckRuns) of the program harmony-ref runs."""
    from harmony_ref._io import check_output_dir
    from harmony_ref.job.runtime_check_program import check_program, program_check

    where = f"--model {args.model}: check-runtime runs a .pte itself"
    if args.commands:
        raise ValueError(f"{where}; give it no --command")
    if args.session:
        raise ValueError(f"{where}, on this host; give it no --session")
    if args.parser != "llama-perplexity":
        raise ValueError(f"{where}; give it no --parser {args.parser}")
    if len(args.label) > 1:
        raise ValueError(f"--label given {len(args.label)} times for one .pte: give one or none")
    check_output_dir(args.out_dir, "--out-dir")
    check, program = program_check(
        args.model,
        args.context,
        args.chunks,
        args.expect,
        args.label[0] if args.label else "",
        args.corpus,
    )  # every refusal before work
    return _reference_progress(
        args,
        lambda progress: check_program(
            check, program, args.out_dir, progress, use_cache=not args.no_cache
        ),
    )


def _run_commands(args):
    """check-runtime --command TEMPLATE...: (Reference or None, CheckRuns), or the exit code
    when the session's device left."""
    from harmony_ref.job.runtime_check import RuntimeCheck, reference_for
    from harmony_ref.job.runtime_check_run import check_device, run_checks

    if not args.commands:
        raise ValueError("give at least one --command TEMPLATE (or --compare RECORD...)")
    if args.label and len(args.label) != len(args.commands):
        raise ValueError(
            f"--label given {len(args.label)} times for {len(args.commands)} "
            "--command: give one per command or none"
        )
    labels = args.label or [f"cmd{i + 1}" for i in range(len(args.commands))]
    from harmony_ref._io import check_output_dir

    check_output_dir(args.out_dir, "--out-dir")  # before the reference and the runtime run
    from harmony_ref.commands import _args, _session
    from harmony_ref.lab.transport import DeviceGone

    session = _session.load(args.session)
    device = check_device(session, args.device)
    checks = [
        RuntimeCheck(
            t,
            args.parser,
            args.model,
            args.context,
            args.chunks,
            args.expect,
            args.timeout,
            label,
            device,
            session,
            args.corpus,
            parser_flag=_args.spelled(args, "parser", "--parser"),
        )
        for t, label in zip(args.commands, labels)
    ]  # every template checked before work

    ref = None
    if args.parser == "llama-perplexity":
        ref = _reference_progress(
            args,
            lambda progress: reference_for(checks[0], progress, use_cache=not args.no_cache),
        )

    def announce(check) -> None:
        if not args.json:
            print(f"running {check.label}: {check.template}", file=sys.stderr)

    def report(check, error: str) -> None:
        print(error_line("check-runtime", f"{check.label}: {error}"), file=sys.stderr)

    try:
        runs = run_checks(
            checks,
            ref,
            args.out_dir,
            _session.progress(args.json) if session else None,
            announce,
            report,
        )
    except DeviceGone as e:  # the phone left: nothing more can run on it
        return _session.gone_exit(NAME, e, args.verbose)
    return ref, runs
