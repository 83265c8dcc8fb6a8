"""`harmony-ref compare`: one model and policy predicted on several device profiles, side by side
(metrics as rows, profiles as columns, best value marked), optionally as a grouped bar chart."""

from __future__ import annotations

NAME = "compare"
HELP = "compare device profiles for one model/policy (table, md, csv, json; --plot PNG)"

DEFAULT_PROFILES = "harmony-flagship,harmony-midrange,harmony-lowend"


def add_arguments(p) -> None:
    p.add_argument("--profiles", default=DEFAULT_PROFILES, help=f"comma-separated (default {DEFAULT_PROFILES})")
    p.add_argument("--model", default="llama-3.2-3b")
    p.add_argument("--policy", default="int4-g128")
    from harmony_ref.commands._args import add_scenario_arguments

    add_scenario_arguments(p, batch=1, long_dest=True)
    p.add_argument("--format", choices=("table", "md", "csv", "json"), default="table")
    p.add_argument("--json", action="store_true", help="same as --format json")
    p.add_argument("--plot", metavar="PNG", help="also write a grouped bar chart here")


def run(args) -> int:
    import json
    import sys

    from harmony_ref.commands._output import print_table
    from harmony_ref.track.compare import compare_profiles, marked_frame, to_markdown

    if args.plot:
        from harmony_ref._io import check_output_file

        check_output_file(args.plot, "--plot")
    profiles = [s.strip() for s in args.profiles.split(",") if s.strip()]
    frame, notes = compare_profiles(profiles, args.model, args.policy, args.prompt_tokens,
                                    args.new_tokens, args.context_tokens, args.batch)
    fmt = "json" if args.json else args.format
    title = f"{args.model} / {args.policy}: {args.prompt_tokens} prompt + {args.new_tokens} new tokens"
    if fmt == "table":
        print_table(marked_frame(frame), title=title)
        print("* best value of the row (direction-aware; rows with better=none or a tie across all profiles are not marked)")
    elif fmt == "md":
        print(to_markdown(frame), end="")
    elif fmt == "csv":
        sys.stdout.write(frame.to_csv())
    else:
        out = {"model": args.model, "policy": args.policy, "profiles": profiles,
               "metrics": [{"metric": name, **{k: (None if isinstance(v, float) and v != v else v)
                                               for k, v in row.items()}}
                           for name, row in frame.to_dict(orient="index").items()],
               "notes": notes}
        json.dump(out, sys.stdout, indent=2, default=float)
        print()
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.plot:
        from harmony_ref.track.plots import profile_bars

        path = profile_bars(frame, args.plot, title)
        print(f"plot: {path}", file=sys.stderr)
    return 0
