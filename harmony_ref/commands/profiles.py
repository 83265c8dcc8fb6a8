"""`harmony-ref profiles`: the shipped device profiles side by side, with their key numbers."""

from __future__ import annotations

NAME = "profiles"
HELP = (
    "table of the shipped device profiles (NPU peaks, DRAM, launch overhead, RAM budget, thermal)"
)


def add_arguments(p) -> None:
    from harmony_ref.commands._output import add_json_flag

    add_json_flag(p)


def run(args) -> int:
    import dataclasses

    import pandas as pd

    from harmony_ref.commands._output import print_json, print_table
    from harmony_ref.device.runtime import load_profile
    from harmony_ref.device.soc import shipped_profiles

    # Fastest first: by peak DRAM bandwidth, the number that sets decode speed.
    profiles = sorted(
        (load_profile(n) for n in shipped_profiles()), key=lambda p: -p.memory.dram_bandwidth_gbps
    )
    if args.json:
        print_json({p.name: {"source": p.source, **dataclasses.asdict(p)} for p in profiles})
        return 0
    df = pd.DataFrame([p.summary() for p in profiles])
    print_table(df, title="shipped device profiles (harmony_ref/device/profiles/*.toml)")
    print(
        "int4/int8/fp16_tops: matmul peak (NPU Cube, or the CPU fallback when npu is False); "
        "weight_only: what a weight-only int8/int4 matmul computes in (fp16: dequantized; "
        "weight: its weight's dtype; W8A8 computes in int8 on every profile); "
        "app_budget_gb = ram_gb x app_memory_share; sustain_w: thermal sustainable power."
    )
    return 0
