"""`harmony-ref predict`: what the simulated phone predicts for one model, policy and scenario."""

from __future__ import annotations

NAME = "predict"
HELP = "predict TTFT, decode tokens/s, memory and launch overhead on a simulated device profile"


def add_arguments(p) -> None:
    from harmony_ref.commands._args import add_scenario_arguments
    from harmony_ref.commands._output import add_json_flag

    p.add_argument("--model", default="llama-3.2-3b", help="model spec preset (default llama-3.2-3b)")
    p.add_argument("--policy", default="int4-g128", help="shipped policy name or policy .toml path")
    p.add_argument("--profile", default="harmony-flagship", help="shipped profile name or profile .toml path")
    add_scenario_arguments(p, batch=1)
    p.add_argument("--kv-dtype", default="fp16", choices=["fp16", "int8"], help="KV cache storage")
    p.add_argument("--no-fusion", action="store_true", help="run the op graph without the fusion pass")
    p.add_argument("--breakdown", action="store_true",
                   help="also print where prefill and decode time goes, by op kind")
    add_json_flag(p)


def run(args) -> int:
    import pandas as pd

    from harmony_ref.commands._output import print_json, print_table
    from harmony_ref.config import RunConfig
    from harmony_ref.backends.simulated import SimulatedDevice
    from harmony_ref.device.cost import scenario_breakdown

    config = RunConfig.from_names(model=args.model, policy=args.policy, prompt_tokens=args.prompt,
                                  new_tokens=args.new, context_tokens=args.context,
                                  batch=args.batch, fused=not args.no_fusion,
                                  kv_dtype=args.kv_dtype)
    device = SimulatedDevice(args.profile)
    metrics = device.predict(config)
    breakdown = scenario_breakdown(device.profile, config) if args.breakdown else {}
    if args.json:
        print_json({"backend": device.name, "profile": device.profile.name, "config": config.label,
                    "metrics": metrics.to_dict(), **({"breakdown": breakdown} if breakdown else {})})
        return 0
    df = metrics.to_frame().drop(columns=["kind", "flags"])
    # The label is wider than the table: on its own line it does not wrap mid-word.
    print(f"{device.profile.name}: {config.label}")
    print_table(df, title="predicted (simulated device, exact)")
    for title, rows in breakdown.items():
        print_table(pd.DataFrame(rows), title=title)
    if not metrics.value("fits_memory"):
        print(f"warning: peak memory {metrics.value('peak_memory_mb'):,.0f} MB exceeds the app budget "
              f"{metrics.value('app_budget_mb'):,.0f} MB on {device.profile.name}")
    return 0
