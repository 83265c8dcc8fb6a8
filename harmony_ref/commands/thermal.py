"""`harmony-ref thermal`: back-to-back generation on a simulated phone until it throttles."""

from __future__ import annotations

NAME = "thermal"
HELP = (
    "sustained generation: decode tokens/s over time, time to first throttle, sustained/peak at "
    "10 min, peak die and skin temperature, energy per token"
)


def add_arguments(p) -> None:
    from harmony_ref.commands._args import add_model_arguments, add_scenario_arguments, number
    from harmony_ref.commands._output import add_json_flag

    add_model_arguments(p, checkpoints=True)
    p.add_argument(
        "--minutes", type=number(0, above=True), default=30.0, help="simulated minutes (default 30)"
    )
    p.add_argument(
        "--governor",
        choices=["step_wise", "power_allocator", "off"],
        help="override the profile's governor ('off': no throttling)",
    )
    p.add_argument(
        "--dt-ms", type=number(0, above=True), default=10.0, help="time step in ms (default 10)"
    )
    add_scenario_arguments(p, context=None, what="per reply (decode cost is averaged over them)")
    p.add_argument(
        "--every-s",
        type=number(0, above=True),
        default=60.0,
        help="table/JSON row spacing in s (default 60)",
    )
    p.add_argument("--plot", metavar="PNG", help="write tokens/s and temperatures against time")
    from harmony_ref.commands._args import add_allow_unmatched

    add_allow_unmatched(p)
    add_json_flag(p)


def run(args) -> int:
    import numpy as np
    import pandas as pd

    from harmony_ref.commands._output import print_json, print_table
    from harmony_ref.config import RunConfig, fitting_context
    from harmony_ref.device.runtime import load_profile
    from harmony_ref.device.thermal import MJ_PER_J, sustained_generation
    from harmony_ref.units import MS_PER_S

    if not args.minutes > 0 or not args.dt_ms > 0 or not args.every_s > 0:
        raise ValueError(
            f"--minutes {args.minutes}, --dt-ms {args.dt_ms} and --every-s {args.every_s} must be > 0"
        )
    if args.plot:
        from harmony_ref._io import check_plot_file

        check_plot_file(args.plot)
    profile = load_profile(args.profile)
    from harmony_ref.runtime.loader import resolve_model

    config = RunConfig.from_names(
        model=resolve_model(args.model)[0],
        policy=args.policy,
        prompt_tokens=args.prompt,
        new_tokens=args.new,
        context_tokens=fitting_context(args.prompt, args.new),
        allow_unmatched=args.allow_unmatched,
    )
    result = sustained_generation(
        profile, config, args.minutes, args.dt_ms / MS_PER_S, args.governor
    )
    summary = result.summary()
    series = result.series(bucket_s=args.every_s)
    rows = pd.DataFrame(
        {
            "time_min": series["time_s"] / 60.0,
            "tokens_per_s": series["tokens_per_s"],
            "freq_fraction": series["freq_fraction"],
            "die_c": series["die_c"],
            "skin_c": series["skin_c"],
        }
    )
    title = f"{profile.name}: {config.label}, {summary['governor']}, {args.minutes:g} min"
    if args.plot:
        from harmony_ref.track.plots import thermal_plot

        thermal_plot(result, profile.thermal, title, args.plot)
    if args.json:
        ttf = summary["time_to_first_throttle_s"]
        summary["time_to_first_throttle_s"] = ttf if np.isfinite(ttf) else None
        print_json(
            {
                "profile": profile.name,
                "config": config.label,
                "summary": summary,
                "operating_points": {
                    "freq_fraction": result.points.freq_steps.tolist(),
                    "power_w": result.points.power_w.tolist(),
                    "tokens_per_s": result.points.tokens_per_s.tolist(),
                },
                "series": rows.to_dict(orient="records"),
                "plot": args.plot,
            }
        )
        return 0
    pts = pd.DataFrame(
        {
            "freq_fraction": result.points.freq_steps,
            "power_w": result.points.power_w,
            "decode_tokens_per_s": result.points.tokens_per_s,
            "energy_per_token_mj": result.points.power_w / result.points.tokens_per_s * MJ_PER_J,
        }
    )
    print_table(pts, title=f"{profile.name}: decode operating points (one per frequency step)")
    print_table(rows, title=title)
    summ = pd.DataFrame(
        [
            {"metric": k, "value": float(v)}
            for k, v in summary.items()
            if k != "governor" and v is not None
        ]
    )
    print_table(summ, title="summary")
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0
