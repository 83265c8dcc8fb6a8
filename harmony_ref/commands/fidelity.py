"""`harmony-ref fidelity`: the device model's predictions beside real measurements (this host's
runtime, llama.cpp on this host, published phone figures, phone records), the error of each,
and the MAPE per set on the held-out points only (track/fidelity.py)."""

from __future__ import annotations

NAME = "fidelity"
HELP = (
    "predicted vs measured for host runs, llama-bench runs, published phone figures and "
    "records; MAPE per set on held-out points; --plot, --json, record metrics"
)


def add_arguments(p) -> None:
    from harmony_ref.commands._output import add_json_flag
    from harmony_ref.track.fidelity import DEFAULT_SETS, SETS

    p.add_argument(
        "--sets",
        default=",".join(DEFAULT_SETS),
        help=f"comma-separated sets of {', '.join(SETS)} (default {','.join(DEFAULT_SETS)})",
    )
    p.add_argument(
        "--figures",
        metavar="TOML",
        help="a file of published figures (harmony_ref/data/fidelity/published.toml's "
        'shape); its split = "score" figures are scored',
    )
    p.add_argument(
        "--records",
        nargs="+",
        default=[],
        metavar="RECORD",
        help="run records of measured phones (measure / run --backend command): scored",
    )
    p.add_argument(
        "--runtime", help="--records: the runtime profile they ran (default: the profile's own)"
    )
    p.add_argument(
        "--plot", metavar="PNG", help="write predicted vs measured (log axes, y = x, ±25%%)"
    )
    p.add_argument("--points", action="store_true", help="print every point, not only the summary")
    p.add_argument(
        "--markdown",
        action="store_true",
        help="print the README's tables (host, llama.cpp, phones) as Markdown",
    )
    add_json_flag(p)


def run(args) -> int:
    import pandas as pd

    from harmony_ref._io import check_plot_file
    from harmony_ref.commands._output import print_json, print_table
    from harmony_ref.track import fidelity as fd

    if args.plot:
        check_plot_file(args.plot)
    sets = tuple(s.strip() for s in args.sets.split(",") if s.strip())
    # a flag that would do nothing in these sets is refused, not ignored
    if args.figures and "phones" not in sets:
        raise ValueError(f"--figures {args.figures}: applies to --sets phones (given: {args.sets})")
    if args.runtime and not args.records:
        raise ValueError(f"--runtime {args.runtime}: applies to --records (none given)")
    points = fd.collect(sets, args.figures, args.records, args.runtime)
    if not points:
        raise ValueError("fidelity: no points (check --sets, --figures, --records)")
    scored = fd.score(points)
    rows = fd.summary(scored)
    from harmony_ref.backends.host_timing import cpu_id

    cpus, here = fd.fixture_cpus(sets), cpu_id()
    metrics = fd.fidelity_metrics(rows, cpus)
    if args.plot:
        fd.plot(scored, args.plot)
    if args.json:
        print_json(
            {
                "summary": rows,
                "points": fd.table_rows(scored),
                "metrics": metrics.to_dict(),
                "fixture_cpus": cpus,
                "this_cpu": here,
            }
        )
        return 0
    if args.markdown:
        print(fd.markdown_tables(scored, rows), end="")
        return 0
    pts = pd.DataFrame(fd.table_rows(scored))
    if args.points:
        print_table(pts.drop(columns=["profile"]), title="every point: predicted vs measured")
    else:
        held = pts[pts["split"] == "score"]
        if len(held):
            print_table(
                held[["set", "id", "metric", "measured", "predicted", "error_pct"]],
                title="held-out points (scored): predicted vs measured",
            )
    print_table(
        pd.DataFrame(rows), title="MAPE per set: fitted points apart, held-out points scored"
    )
    for name in metrics.names():
        m = metrics[name]
        print(f"{name}: {m.value:.2f} {m.unit}")
    if cpus:
        print(fd.machine_note(cpus, here))
    if args.plot:
        print(f"plot: {args.plot}")
    return 0
