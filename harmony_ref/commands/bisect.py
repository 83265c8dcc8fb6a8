"""`harmony-ref bisect`: find the first commit of the system under test at which a metric got
worse, between a good and a bad revision, on this host (track/bisect.py).

Exit codes: 0 the first bad commit named; 1 the range could not be narrowed to one commit
(skipped builds around it, or --max-runs reached); 2 bad input (unknown revision, good not an
ancestor of bad, good and bad not different, a metric the command never prints, a failing build
of an end).
"""

from __future__ import annotations

NAME = "bisect"
HELP = "find the commit that made a metric worse: worktrees, builds, adaptive repeats (host)"


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
        required=True,
        metavar="CMD",
        help="benchmark command, run in each commit's worktree",
    )
    add_renamed(
        p,
        "--parser",
        required=True,
        choices=OUTPUT_FORMATS,
        help="the parser of the command's output",
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
    b = Bisection(
        args.repo,
        args.good,
        args.bad,
        args.command_template,
        args.parser,
        args.metric,
        build=args.build,
        max_runs=args.max_runs,
        cache=args.cache_dir,
        timeout_s=args.timeout,
        note=lambda s: print(s, file=sys.stderr),
    )  # revisions and range checked here, before anything is built or written
    b.history = open_history(args.history)
    result = b.run()
    if args.json:
        print_json(result.to_dict())
    else:
        print(to_text(result), end="")
    return 0 if result.first_bad else 1


def to_text(r) -> str:
    lines = []
    if r.first_bad:
        lines.append(f"first bad commit: {r.first_bad} (parent {r.parent})")
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
