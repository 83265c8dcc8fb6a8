"""`harmony-ref predict`: what the simulated phone predicts for one model, policy and scenario."""

from __future__ import annotations

NAME = "predict"
HELP = "predict TTFT, decode tokens/s, memory and launch overhead on a simulated device profile"


def add_arguments(p) -> None:
    from harmony_ref.commands._args import (
        add_model_arguments,
        add_runtime_argument,
        add_scenario_arguments,
    )
    from harmony_ref.commands._output import add_json_flag

    add_model_arguments(
        p,
        checkpoints=True,
        policy_help="as-stored: a GGUF file's own tensor types, each Linear as the file stores it",
    )
    add_runtime_argument(p)
    p.add_argument(
        "--runtime-threads",
        type=int,
        metavar="N",
        help="a CPU runtime's thread count (default: the runtime's)",
    )
    add_scenario_arguments(p, batch=1)
    p.add_argument("--kv-dtype", default="fp16", choices=["fp16", "int8"], help="KV cache storage")
    p.add_argument(
        "--no-fusion", action="store_true", help="run the op graph without the fusion pass"
    )
    p.add_argument(
        "--breakdown",
        action="store_true",
        help="also print where prefill and decode time goes, by op kind (CPU fallback ops too)",
    )
    p.add_argument(
        "--prefix-tokens",
        type=int,
        default=0,
        help="of the prompt, already in the KV cache (a shared system prompt; default 0)",
    )
    p.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="also predict the CPU path on the profile's clusters at 1..N threads "
        "(tokens/s per thread count and the best one)",
    )
    from harmony_ref.commands._args import add_allow_unmatched

    add_allow_unmatched(p)
    add_json_flag(p)


def run(args) -> int:
    import pandas as pd

    from harmony_ref.backends.simulated import SimulatedDevice
    from harmony_ref.commands._output import print_json, print_table
    from harmony_ref.config import RunConfig
    from harmony_ref.device.cost_breakdown import scenario_breakdown
    from harmony_ref.device.threads import require_cpu, thread_sweep
    from harmony_ref.quant.policy import AS_STORED
    from harmony_ref.runtime.loader import file_policy, resolve_model

    spec, checkpoint = resolve_model(args.model)  # a bad file is one line naming it, exit 2
    policy = file_policy(args.model) if args.policy == AS_STORED else args.policy
    config = RunConfig.from_names(
        model=spec,
        policy=policy,
        prompt_tokens=args.prompt,
        new_tokens=args.new,
        context_tokens=args.context,
        batch=args.batch,
        fused=not args.no_fusion,
        kv_dtype=args.kv_dtype,
        prefix_tokens=args.prefix_tokens,
        checkpoint=checkpoint,
        allow_unmatched=args.allow_unmatched,
    )
    from harmony_ref.device.runtime import load_profile
    from harmony_ref.device.soc import load_soc

    if args.runtime_threads is not None and args.runtime_threads < 1:
        raise ValueError(f"--runtime-threads {args.runtime_threads}: must be >= 1")
    device = SimulatedDevice(load_profile(args.profile, args.runtime, args.runtime_threads))
    soc = load_soc(args.profile)
    runtime = args.runtime or soc.default_runtime or None
    threads = None
    if args.threads is not None:
        cores = require_cpu(device.profile).cores
        if not 1 <= args.threads <= cores:
            raise ValueError(
                f"--threads {args.threads}: must be in 1..{cores} ({device.profile.name}'s cores)"
            )
        points, best = thread_sweep(device.profile, config)
        threads = {
            "points": [vars(p) for p in points[: args.threads]],
            "best_threads": best.threads,
            "best_of_all_cores": vars(best),
        }
    metrics = device.predict(config)
    breakdown = scenario_breakdown(device.profile, config) if args.breakdown else {}
    matmul = _matmul_efficiency(soc.name, runtime)
    if args.json:
        print_json(
            {
                "backend": device.name,
                "profile": device.profile.name,
                "runtime": runtime,
                **({"matmul_efficiency": matmul} if matmul else {}),
                "config": config.label,
                "metrics": metrics.to_dict(),
                **({"breakdown": breakdown} if breakdown else {}),
                **({"threads": threads} if threads else {}),
            }
        )
        return 0
    df = metrics.to_frame().drop(columns=["kind", "flags"])
    # The label is wider than the table: on its own line it does not wrap mid-word.
    print(f"{device.profile.name}: {config.label}")
    print_table(df, title="predicted (simulated device, exact)")
    if matmul:
        print(
            f"{runtime}'s matmul efficiency on {matmul['soc']}: {matmul['value']:.4g} ({matmul['from']})"
        )
    for title, rows in breakdown.items():
        print_table(pd.DataFrame(rows), title=title)
    if threads:
        b = threads["best_of_all_cores"]
        short = {
            "prefill_tokens_per_s": "prefill_tok_s",
            "decode_tokens_per_s": "decode_tok_s",
            "sync_ms_per_token": "sync_ms_per_step",
        }
        print_table(
            pd.DataFrame(threads["points"]).rename(columns=short),
            title=f"CPU path on {device.profile.name}'s clusters, by thread count",
        )
        print(
            f"best: {b['threads']} threads ({b['cores']}), {b['decode_tokens_per_s']:.2f} decode "
            f"tokens/s, {b['prefill_tokens_per_s']:.1f} prefill tokens/s (of 1..{len(threads['points'])} "
            f"shown, best over all {require_cpu(device.profile).cores} cores)"
        )
    if not metrics.value("fits_memory"):
        print(
            f"warning: peak memory {metrics.value('peak_memory_mb'):,.0f} MB exceeds the app budget "
            f"{metrics.value('app_budget_mb'):,.0f} MB on {device.profile.name}"
        )
    return 0


def _matmul_efficiency(soc: str, runtime: str | None) -> dict:
    """Which matmul efficiency the prediction used: the SoC's own (a [[soc_efficiency]] entry
    of the runtime, fitted on that SoC's figures) or the runtime's shared one."""
    if not runtime:
        return {}
    from harmony_ref.device.runtime import load_runtime

    rt = load_runtime(runtime)
    entry = rt.soc_entry(soc)
    if entry is None:
        return {"soc": soc, "value": rt.efficiency.matmul, "from": "the runtime's shared value"}
    return {
        "soc": soc,
        "value": entry.matmul,
        "from": f"this SoC's own, fitted on {', '.join(entry.fitted_on) or 'figures of it'}",
    }
