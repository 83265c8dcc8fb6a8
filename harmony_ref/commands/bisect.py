"""`harmony-ref bisect`: find the first commit of the system under test at which a metric got
worse, between a good and a bad revision, on this host or through a device session
(`--session`: each commit's built artifact pushed by SHA-256, cooldown, throttled repeats left
out; track/bisect.py).

Exit codes: 0 the first bad commit found; 1 the range could not be narrowed to one commit
(skipped builds around it, or --max-runs reached), or only to a probable one (a commit between
still "unknown" against both ends after its 10 runs, placed by the nearer median), or the
benchmark failed on the device; 2 bad
input (unknown revision, good not an ancestor of bad, good and bad not different, a metric the
command never prints, a failing build of an end), or the device left mid-session.
"""

from __future__ import annotations

NAME = "bisect"
HELP = "find the commit that made a metric worse: worktrees, builds, adaptive repeats (host/phone)"


def add_arguments(p) -> None:
    from harmony_ref.commands._args import add_renamed, count, number
    from harmony_ref.commands._output import add_json_flag
    from harmony_ref.lab.parsers import OUTPUT_FORMATS

    p.add_argument("--repo", required=True, metavar="DIR", help="git checkout of the SUT")
    p.add_argument("--good", required=True, metavar="REV", help="a revision without the regression")
    p.add_argument("--bad", required=True, metavar="REV", help="a revision with it")
    p.add_argument("--build", metavar="CMD", help="build command, run in each commit's worktree")
    p.add_argument(
        "--command",
        dest="command_template",
        metavar="CMD",
        help="benchmark command, run in each commit's worktree (with --session: on the device; "
        "default the session's benchmark.command)",
    )
    add_renamed(
        p,
        "--parser",
        choices=OUTPUT_FORMATS,
        help="the parser of the command's output (with --session: default the session's "
        "benchmark.format)",
    )
    p.add_argument(
        "--session",
        metavar="FILE",
        help="measure on a device: a session file whose relative [[push]] files are the build's "
        "artifacts in each commit's worktree (pushed by SHA-256; cooldown; throttled repeats "
        "left out)",
    )
    p.add_argument("--metric", required=True, help="the metric that got worse (e.g. ttft_ms)")
    p.add_argument(
        "--max-runs", type=count(2), default=150, metavar="N", help="benchmark runs at most"
    )
    p.add_argument(
        "--cache-dir",
        default="results/bisect",
        help="where the worktrees are kept, by commit (default results/bisect)",
    )
    p.add_argument(
        "--history",
        metavar="PATH_OR_URL",
        help="run history every run is appended to and resumed from "
        "(default $HARMONY_REF_HISTORY, else results/history.sqlite)",
    )
    p.add_argument(
        "--timeout", type=number(0, above=True), default=600.0, metavar="S", help="per run"
    )
    add_json_flag(p)


def run(args) -> int:
    import sys

    from harmony_ref._io import check_output_dir
    from harmony_ref.commands._output import print_json
    from harmony_ref.track.bisect import Bisection
    from harmony_ref.track.history import open_history

    check_output_dir(args.cache_dir, "--cache-dir")
    session, command, fmt = _session_command(args)
    b = Bisection(
        args.repo,
        args.good,
        args.bad,
        command,
        fmt,
        args.metric,
        build=args.build,
        max_runs=args.max_runs,
        cache=args.cache_dir,
        timeout_s=args.timeout,
        note=lambda s: print(s, file=sys.stderr),
        session=session,
    )  # revisions and range checked here, before anything is built or written
    b.history = open_history(args.history)
    from harmony_ref.commands._session import error_exit, gone_exit
    from harmony_ref.lab.errors import BackendError
    from harmony_ref.lab.transport import DeviceGone

    try:
        result = b.run()
    except DeviceGone as e:  # the runs so far are in the history: a rerun resumes from them
        return gone_exit(NAME, e)
    except BackendError as e:
        return error_exit(NAME, e, 1)
    if args.json:
        print_json(result.to_dict())
    else:
        print(to_text(result), end="")
    return 0 if result.certain else 1


def _session_command(args):
    """(session spec or None, command, parser): --command/--parser, else the session's."""
    session = None
    if args.session:
        from harmony_ref.lab.session_spec import load_session

        # relative [[push]] files are the build's, in each worktree: checked once built
        session = load_session(args.session, push_root=args.repo)
    b = session.benchmark if session else None
    command = args.command_template or (b.command if b else "")
    fmt = args.parser or (b.format if b else "")
    for flag, value, field in (("--command", command, "command"), ("--parser", fmt, "format")):
        if not value:
            raise ValueError(
                f"{flag}: missing"
                + (f" (and {args.session} sets no benchmark.{field})" if b else "")
            )
    if session is not None:
        from harmony_ref.backends.command import fill_template
        from harmony_ref.lab.session import session_values

        fill_template(command, session_values(session))  # a placeholder it lacks: exit 2 now
    return session, command, fmt


def to_text(r) -> str:
    from harmony_ref.track.bisect import RUNS_CAP

    lines = []
    if r.first_bad and r.certain:
        lines.append(f"first bad commit: {r.first_bad} (parent {r.parent})")
    elif r.first_bad:
        placed = ", ".join(f"{c[:12]} ({side})" for c, side in r.placed_by_nearness)
        lines.append(f"probable first bad commit: {r.first_bad} (parent {r.parent})")
        lines.append(
            f"unknown, not found: still neither the good nor the bad level after {RUNS_CAP} runs, "
            f"placed by the nearer median: {placed} (a quieter machine or longer runs may decide)"
        )
    else:
        why = "--max-runs reached" if r.budget_exhausted else "skipped commits around it"
        lines.append(f"not narrowed to one commit ({why}): in {r.range[0]}..{r.range[1]}")
    lines.append(
        f"{r.metric}: {r.change_pct:+.1f}% (95% CI {r.ci_pct[0]:+.1f}% to {r.ci_pct[1]:+.1f}%) "
        f"from good to bad, p = {r.p_value:.2g}; {r.total_runs} benchmark runs"
    )
    lines.append(f"{'commit':<12}  {'runs':>4}  {'median':>10}")
    for c in r.measured:
        lines.append(f"{c.commit[:12]:<12}  {c.runs:>4}  {c.median:>10.4g}")
    for c in r.skipped:
        lines.append(f"skipped {c.commit[:12]}: {c.detail}")
    return "\n".join(lines) + "\n"
