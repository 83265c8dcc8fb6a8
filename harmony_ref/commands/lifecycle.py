"""`harmony-ref lifecycle`: a user opening and closing a feature N times under three ways of
managing the model instance (destroy on exit, one resident instance, create without destroy):
the NPU memory timeline, the entry at which the leak fails, each strategy's latency."""

from __future__ import annotations

NAME = "lifecycle"
HELP = (
    "model lifecycle over N open/close entries: destroy | resident | leak; NPU memory "
    "timeline, the entry the leak fails at, latency per strategy"
)


def add_arguments(p) -> None:
    from harmony_ref.commands._args import add_model_arguments
    from harmony_ref.commands._output import add_json_flag
    from harmony_ref.device.lifecycle import DEFAULT_ENTRIES, MAX_ENTRIES, STRATEGIES

    p.add_argument(
        "--strategy",
        choices=STRATEGIES,
        action="append",
        help="destroy | resident | leak (repeatable; default: all three)",
    )
    p.add_argument(
        "--entries",
        type=int,
        default=DEFAULT_ENTRIES,
        help=f"times the user opens the feature (default {DEFAULT_ENTRIES}, at most "
        f"{MAX_ENTRIES:,})",
    )
    add_model_arguments(p, checkpoints=True)
    from harmony_ref.commands._args import add_scenario_arguments

    add_scenario_arguments(p, new=None, context=None, what="of each first request")
    p.add_argument("--plot", metavar="PNG", help="write the NPU memory timeline as a PNG")
    from harmony_ref.commands._args import add_allow_unmatched

    add_allow_unmatched(p)
    add_json_flag(p)


def run(args) -> int:
    import pandas as pd

    from harmony_ref.commands._output import print_json, print_table
    from harmony_ref.config import RunConfig, fitting_context
    from harmony_ref.device.lifecycle import MAX_ENTRIES, STRATEGIES, simulate_lifecycle
    from harmony_ref.device.runtime import load_profile

    if args.entries < 1:
        raise ValueError(f"--entries {args.entries}: must be >= 1")
    if args.entries > MAX_ENTRIES:
        raise ValueError(f"--entries {args.entries:,}: at most {MAX_ENTRIES:,}")
    if args.plot:
        from harmony_ref._io import check_plot_file

        check_plot_file(args.plot)
    profile = load_profile(args.profile)
    from harmony_ref.runtime.loader import resolve_model

    config = RunConfig.from_names(
        model=resolve_model(args.model)[0],
        policy=args.policy,
        prompt_tokens=args.prompt,
        context_tokens=fitting_context(args.prompt),
        allow_unmatched=args.allow_unmatched,
    )
    runs = [
        simulate_lifecycle(profile, config, s, args.entries) for s in (args.strategy or STRATEGIES)
    ]
    if args.plot:
        from harmony_ref.track.lifecycle_plot import plot_lifecycle

        plot_lifecycle(
            runs, args.plot, f"{config.spec.name} {config.policy.name} on {profile.name}"
        )
    if args.json:
        print_json(
            {
                "profile": profile.name,
                "model": config.spec.name,
                "policy": config.policy.name,
                "strategies": [
                    {**r.summary(), "timeline": [vars(e) for e in r.entries]} for r in runs
                ],
            }
        )
        return 0
    one = runs[0]
    print(
        f"{config.spec.name} {config.policy.name} on {profile.name}: one instance holds "
        f"{one.instance_mb:,.0f} MB of NPU memory, npu.memory_mb = {one.budget_mb:,.0f}; "
        f"{args.entries} entries"
    )
    cols = [
        "strategy",
        "succeeded",
        "fail_entry",
        "first_enter_ms",
        "later_enter_ms",
        "total_enter_ms",
        "peak_npu_mb",
        "held_after_last_mb",
    ]
    print_table(
        pd.DataFrame([r.summary() for r in runs])[cols],
        title="lifecycle strategies (enter_ms: tap to first token)",
    )
    rows = [
        {
            "entry": e.entry,
            **{f"{r.strategy}_mb": r.entries[i].npu_mb_closed for r in runs},
            **{f"{r.strategy}_ms": r.entries[i].enter_ms for r in runs},
        }
        for i, e in enumerate(one.entries[: min(args.entries, 8)])
    ]
    print_table(
        pd.DataFrame(rows),
        title="timeline: NPU MB held after each exit, tap-to-first-token ms per entry (0 = failed)",
    )
    for r in runs:
        if r.fail_entry:
            print(
                f"{r.strategy}: fails at entry {r.fail_entry} (NPU memory exhausted: "
                f"{r.fail_entry} x {r.instance_mb:,.0f} MB > {r.budget_mb:,.0f} MB)"
                if r.strategy == "leak"
                else f"{r.strategy}: fails at entry {r.fail_entry}"
            )
    if args.plot:
        print(f"wrote {args.plot}")
    return 0
