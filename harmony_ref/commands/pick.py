"""`harmony-ref pick`: from a sweep, the best feasible (model, policy, KV dtype) per phone and
runtime, naming the runtime of each winner and each loser's reason, and why
every other loses; tables as text, Markdown, CSV or JSON; --plot writes the Pareto plot per
phone (decode tokens/s against accuracy loss, marker size = peak memory, infeasible grey)."""

from __future__ import annotations

NAME = "pick"
HELP = (
    "the best feasible model/policy per phone and runtime from a sweep, why the others lose; "
    "Pareto plot"
)


def add_arguments(p) -> None:
    from harmony_ref.commands._args import add_renamed, number

    p.add_argument("--sweep", required=True, metavar="NAME", help="results/sweeps/NAME/")
    p.add_argument("--profile", help="comma-separated phones (default: every one in the sweep)")
    p.add_argument("--models", help="comma-separated: choose among these models only")
    p.add_argument(
        "--runtime", help="comma-separated runtimes: answers for these only (default: every one)"
    )
    p.add_argument(
        "--budget-mb",
        type=number(0, above=True),
        help="peak memory limit (default: the phone's own app budget)",
    )
    p.add_argument("--max-kld", type=number(0), help="mean KL divergence limit (LM accuracy)")
    p.add_argument(
        "--max-accuracy-drop", type=number(), help="MiniLM recall@1 drop limit, in points"
    )
    p.add_argument("--min-decode-tps", type=number(0), help="decode tokens/s floor")
    p.add_argument(
        "--objective",
        choices=("decode", "accuracy", "memory"),
        default="decode",
        help="what the best maximises among the feasible: decode tokens/s (default), "
        "least accuracy loss, least peak memory",
    )
    p.add_argument(
        "--machine",
        help="use the points measured on this host (measured metrics "
        "of several machines are never ranked together)",
    )
    add_renamed(
        p, "--style", choices=("table", "md", "csv", "json"), default="table", help="report style"
    )
    p.add_argument("--json", action="store_true", help="same as --style json")
    p.add_argument(
        "--plot",
        metavar="PNG",
        help="write the Pareto plot here (one file per phone and scenario: PNG's stem + -PROFILE)",
    )
    p.add_argument("--out-dir", default="results/sweeps", help="default results/sweeps")


def run(args) -> int:
    import sys

    from harmony_ref.commands._output import print_json, print_table
    from harmony_ref.sweep.pick import answer_line, pick, read_points, to_markdown
    from harmony_ref.sweep.store import SweepStore

    if args.plot:  # one file per phone and scenario beside it: PNG's stem + -PROFILE
        from harmony_ref._io import check_plot_file

        check_plot_file(args.plot)
    store = SweepStore(args.sweep, args.out_dir)
    profiles = [s.strip() for s in args.profile.split(",") if s.strip()] if args.profile else None
    answers = pick(
        read_points(store),
        profiles,
        args.budget_mb,
        args.max_kld,
        args.max_accuracy_drop,
        args.min_decode_tps,
        args.objective,
        args.machine,
        [s.strip() for s in args.models.split(",") if s.strip()] if args.models else None,
        [s.strip() for s in args.runtime.split(",") if s.strip()] if args.runtime else None,
    )
    fmt = "json" if args.json else args.style
    plots = _plots(answers, args.plot) if args.plot else []
    if fmt == "json":
        print_json(
            {
                "sweep": args.sweep,
                "answers": [a.to_dict() for a in answers],
                "plots": [str(p) for p in plots],
            }
        )
        return 0
    for a in answers:
        if fmt == "table":
            print_table(a.frame, title=answer_line(a))
        elif fmt == "md":
            print(f"**{answer_line(a)}**\n")
            print(to_markdown(a.frame))
        else:
            sys.stdout.write(a.frame.assign(profile=a.profile, **a.scenario).to_csv(index=False))
    if fmt == "table":
        loss = answers[0].loss_metric if answers else None
        print(
            f"accuracy_loss: {loss or 'not measured'}; pareto: no feasible point is both "
            "faster and more accurate"
        )
    for p in plots:
        print(f"plot: {p}", file=sys.stderr)
    return 0


def _plots(answers, png: str):
    from pathlib import Path

    from harmony_ref.sweep.pareto import pareto_plot

    out = []
    base = Path(png)
    for a in answers:
        path = (
            base
            if len(answers) == 1
            else base.with_name(
                f"{base.stem}-{a.profile}{'-' + a.runtime if a.runtime else ''}"
                f"-p{a.scenario['prompt_tokens']}-b{a.scenario['batch']}.png"
            )
        )
        out.append(pareto_plot(a, path))
    return out
