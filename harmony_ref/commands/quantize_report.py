"""`harmony-ref quantize-report`: bits per weight and round-trip error of every weight format on
a seeded random matrix shaped and scaled like an LLM projection."""

from __future__ import annotations

NAME = "quantize-report"
HELP = "table of the weight formats: true bits/weight, scale overhead and round-trip error"


def add_arguments(p) -> None:
    from harmony_ref.commands._output import add_json_flag

    p.add_argument("--rows", type=int, default=1024, help="N of the test matrix (default 1024)")
    p.add_argument("--cols", type=int, default=4096, help="K of the test matrix (default 4096)")
    p.add_argument("--seed", type=int, default=0)
    add_json_flag(p)


def run(args) -> int:
    from harmony_ref.commands._output import print_json, print_table
    from harmony_ref.eval.formats import format_report

    df = format_report(args.rows, args.cols, args.seed)
    if args.json:
        print_json(
            {
                "rows": args.rows,
                "cols": args.cols,
                "seed": args.seed,
                "formats": df.to_dict(orient="records"),
            }
        )
    else:
        print_table(
            df,
            title=f"weight formats on a seeded {args.rows}x{args.cols} matrix "
            "(N(0, 0.02) with 0.1% 8x outliers)",
        )
        print(
            "overhead_pct: storage beyond the nominal 4 or 8 bits (scales, zero points), "
            "computed from the real arrays."
        )
    return 0
