"""`harmony-ref check-ops`: the converter whitelist check before deployment: which of a model's op
types the profile's NPU runs, which fall back to the CPU, which run nowhere (exit 1)."""

from __future__ import annotations

NAME = "check-ops"
HELP = (
    "list a model's op types the profile's NPU does not run (CPU fallback) or no backend runs "
    "(exit 1), before deployment"
)


def add_arguments(p) -> None:
    from harmony_ref.commands._args import add_model_arguments
    from harmony_ref.commands._output import add_json_flag

    add_model_arguments(p, checkpoints=True)
    from harmony_ref.commands._args import add_scenario_arguments

    add_scenario_arguments(p, new=None, context=None, what="for the run counts")
    from harmony_ref.commands._args import add_allow_unmatched

    add_allow_unmatched(p)
    add_json_flag(p)


def run(args) -> int:
    import pandas as pd

    from harmony_ref.commands._output import print_json, print_table
    from harmony_ref.config import RunConfig, fitting_context
    from harmony_ref.device.ops import check_ops
    from harmony_ref.device.runtime import load_profile
    from harmony_ref.runtime.loader import resolve_model

    profile = load_profile(args.profile)
    model = resolve_model(args.model)[0]
    config = RunConfig.from_names(
        model=model,
        policy=args.policy,
        prompt_tokens=args.prompt,
        context_tokens=fitting_context(args.prompt),
        allow_unmatched=args.allow_unmatched,
    )
    rows = check_ops(profile, config)
    fallback = [r["op"] for r in rows if r["runs_on"] == "fallback"]
    none = [r["op"] for r in rows if r["runs_on"] == "none"]
    code = 1 if none else 0
    if args.json:
        print_json(
            {
                "profile": profile.name,
                "profile_file": profile.source,
                "model": config.spec.name,
                "ops": rows,
                "fallback": fallback,
                "unsupported": none,
                "exit_code": code,
            }
        )
        return code
    print_table(pd.DataFrame(rows), title=f"{config.spec.name} op types on {profile.name}")
    if none:
        print(
            f"FAIL: {', '.join(none)}: in neither npu.ops nor npu.cpu_ops of {profile.source}; "
            f"no backend of {profile.name} runs {'it' if len(none) == 1 else 'them'}"
        )
    if fallback:
        print(
            f"CPU fallback: {', '.join(fallback)} (not in npu.ops): each run pays CPU time, the "
            "NPU <-> CPU copy of its inputs and outputs and a launch on each side; "
            "`harmony-ref predict --breakdown` shows the cost"
        )
    if not none and not fallback:
        from harmony_ref.device.ops import has_npu

        where = (
            f"the NPU of {profile.name}"
            if has_npu(profile)
            else f"{profile.name} has no NPU; its CPU runtime"
        )
        print(f"ok: {where} runs every op type {config.spec.name} uses")
    return code
