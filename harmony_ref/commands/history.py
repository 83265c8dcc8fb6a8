"""`harmony-ref history`: one metric over the commits of the system under test, with its change
points (track/history_report.py); `history import FILE...` adds existing run records to the
history (track/history.py).

Exit codes: 0, or with `--check` 1 when the newest change point is a regression beyond the
metric's gate tolerance (the nightly job); 2 bad input (unknown metric, unreachable or foreign
database, a --sut that is no git checkout, an invalid record), nothing written.
"""

from __future__ import annotations

NAME = "history"
HELP = "a metric over the SUT's commits with its change points; `history import FILE...`"


def add_arguments(p) -> None:
    from harmony_ref.commands._output import add_json_flag

    p.add_argument("action", nargs="?", choices=["import"], help="import: add record files")
    p.add_argument("files", nargs="*", metavar="FILE", help="with import: run record JSON files")
    p.add_argument(
        "--history",
        metavar="PATH_OR_URL",
        help="SQLite file or postgresql:// URL (default $HARMONY_REF_HISTORY, else "
        "results/history.sqlite)",
    )
    p.add_argument("--metric", help="the metric to follow (e.g. decode_ms)")
    p.add_argument("--config", help="config label (as `history` lists them) when several")
    p.add_argument("--device", help="machine (hostname or phone serial, model, CPU) when several")
    p.add_argument(
        "--sut",
        metavar="DIR",
        default=None,
        help="git checkout whose commit order the series follows (default harmony-ref's own)",
    )
    p.add_argument("--plot", metavar="PNG", help="also draw the series and its change points")
    p.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when the newest change point is a regression beyond the tolerance",
    )
    p.add_argument(
        "--tolerances", help="tolerance TOML (default: harmony_ref/data/gate_tolerances.toml)"
    )
    add_json_flag(p)


def _import(args) -> int:
    from harmony_ref.commands._output import print_json
    from harmony_ref.track.history import open_history
    from harmony_ref.track.record import load_record

    if not args.files:
        raise ValueError("history import: give the record files (e.g. results/runs/*.json)")
    items = [(load_record(f).to_dict(), str(f)) for f in args.files]  # all valid, then write
    history = open_history(args.history)
    added = history.append_many(items)
    if args.json:
        print_json({"history": history.name, "files": len(items), "added": added})
    else:
        print(f"{history.name}: {added} of {len(items)} records added (the rest were there)")
    return 0


def run(args) -> int:
    import sys

    if args.action == "import":
        return _import(args)
    if args.files:
        raise ValueError(f"{args.files[0]}: files are read only by `history import`")
    if not args.metric:
        raise ValueError("give --metric NAME (or `history import FILE...`)")

    from pathlib import Path

    from harmony_ref._io import check_plot_file
    from harmony_ref.commands._output import print_json
    from harmony_ref.track.gate import load_tolerances
    from harmony_ref.track.history import open_history
    from harmony_ref.track.history_report import build_report, commit_order, to_json, to_text

    tolerances = load_tolerances(args.tolerances)
    if args.plot:
        check_plot_file(args.plot)
    sut = args.sut or str(Path(__file__).resolve().parents[2])
    order = commit_order(sut)
    history = open_history(args.history, create=False)
    rows = history.series(args.metric, args.config, args.device)
    if not rows:
        names = history.metric_names()
        if args.metric not in names:
            shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
            raise ValueError(
                f"--metric {args.metric}: not in the history {history.name} "
                f"(it holds: {shown or 'nothing'})"
            )
        raise ValueError(
            f"--metric {args.metric}: no values for --config {args.config!r} --device "
            f"{args.device!r} in {history.name}"
        )
    report = build_report(rows, args.metric, order, tolerances)
    if args.plot:
        from harmony_ref.track.plots import history_plot

        history_plot(report, args.plot)
    if args.json:
        print_json(to_json(report))
    else:
        print(to_text(report), end="")
    u = report.unconfirmed
    if args.check and u is not None and u.regression:
        print(
            f"harmony-ref history: unconfirmed: the newest commit {u.first[:10]} alone has "
            f"{args.metric} {u.point.change_pct:+.1f}% (tolerance {u.tolerance_pct:g}%); "
            "measure the next commit",
            file=sys.stderr,
        )
    if args.check and report.check_exit_code:
        c = report.newest
        print(
            f"harmony-ref history: regression: {args.metric} {c.point.change_pct:+.1f}% from "
            f"commit {c.first[:10]} (tolerance {c.tolerance_pct:g}%)",
            file=sys.stderr,
        )
        return 1
    return 0
