"""`harmony-ref coldstart`: tap-to-first-token per strategy (cold, preload, preload + warm-up) and
loader (read, mmap), modelled per profile; `--measure` adds the same steps measured on this host."""

from __future__ import annotations

from harmony_ref.units import MB

NAME = "coldstart"
HELP = (
    "cold start model: where the time from tap to first token goes (cold / preload / "
    "preload + warm-up, read vs mmap); --measure times the host side by side"
)


def add_arguments(p) -> None:
    from harmony_ref.commands._args import add_model_arguments, add_scenario_arguments
    from harmony_ref.commands._output import add_json_flag
    from harmony_ref.job.host_coldstart import DEFAULT_COLS, DEFAULT_LAYERS, DEFAULT_ROWS

    add_model_arguments(p, profile=None, checkpoints=True)
    p.add_argument(
        "--profile",
        action="append",
        help="profile name or .toml (repeatable; default: every shipped profile)",
    )
    add_scenario_arguments(p, new=None, context=None, what="of the first request")
    p.add_argument(
        "--measure",
        action="store_true",
        help="also measure on this host: write an INT4 safetensors file, evict it, load it",
    )
    p.add_argument(
        "--layers",
        type=int,
        default=DEFAULT_LAYERS,
        help=f"host file: matrices (default {DEFAULT_LAYERS})",
    )
    p.add_argument(
        "--rows",
        type=int,
        default=DEFAULT_ROWS,
        help=f"host file: rows each (default {DEFAULT_ROWS})",
    )
    p.add_argument(
        "--cols",
        type=int,
        default=DEFAULT_COLS,
        help=f"host file: cols each (default {DEFAULT_COLS})",
    )
    from harmony_ref.commands._args import add_allow_unmatched

    add_allow_unmatched(p)
    add_json_flag(p)


def run(args) -> int:
    import pandas as pd

    from harmony_ref.commands._output import print_json, print_table
    from harmony_ref.config import RunConfig, fitting_context
    from harmony_ref.device.coldstart import breakdown, coldstart_inputs
    from harmony_ref.device.runtime import load_profile
    from harmony_ref.device.soc import shipped_profiles
    from harmony_ref.runtime.loader import resolve_model

    if args.measure:  # the host file's shape, before any work
        from harmony_ref.job.host_coldstart import check_model_file_shape

        check_model_file_shape(args.layers, args.rows, args.cols)
    config = RunConfig.from_names(
        model=resolve_model(args.model)[0],
        policy=args.policy,
        prompt_tokens=args.prompt,
        context_tokens=fitting_context(args.prompt),
        allow_unmatched=args.allow_unmatched,
    )
    profiles = (
        [load_profile(p) for p in args.profile]
        if args.profile
        else sorted(
            (load_profile(n) for n in shipped_profiles()),
            key=lambda p: -p.memory.dram_bandwidth_gbps,
        )
    )
    rows = []
    for prof in profiles:
        for r in breakdown(prof, config):
            rows.append({"profile": prof.name, **r})
    df = pd.DataFrame(rows)
    file_mb = coldstart_inputs(profiles[0], config).file_bytes / MB
    host = None
    if args.measure:
        from rich.console import Console

        from harmony_ref.job.host_coldstart import measure_host_coldstart

        console = Console(stderr=True)
        with console.status("measuring cold start on this host") as status:
            host = measure_host_coldstart(
                args.layers, args.rows, args.cols, progress=lambda msg: status.update(msg)
            )
    if args.json:
        out = {
            "model": config.spec.name,
            "policy": config.policy.name,
            "model_file_mb": file_mb,
            "modelled": df.to_dict(orient="records"),
        }
        if host is not None:
            out["measured_host"] = host
        print_json(out)
        return 0
    short = df.rename(columns=lambda c: c.removesuffix("_ms"))
    print_table(
        short,
        title=f"cold start, modelled (ms): {config.spec.name} {config.policy.name}, "
        f"{file_mb:,.0f} MB file, {args.prompt}-token prompt",
    )
    print(
        "Steps a strategy no longer pays are 0; mmap moves storage_read into the first inference "
        "(page faults), which preload alone does not hide."
    )
    if host is not None:
        p0 = profiles[0]
        by = {(r["strategy"], r["loader"]): r for r in breakdown(p0, config)}
        from harmony_ref.job.host_coldstart import side_by_side

        sbs = side_by_side(
            by[("cold", "read")], by[("cold", "mmap")], file_mb, host, p0.runtime.storage_read_gbps
        )
        print_table(pd.DataFrame(sbs), title=f"modelled ({p0.name}) vs measured on this host")
        raw = pd.DataFrame(
            [
                {
                    "loader": mode,
                    "eviction": s.get("eviction", ""),
                    "load_ms": s["load_ms"],
                    "repack_ms": s["repack_ms"],
                    "first_gemv_ms": s["first_gemv_ms"],
                    "steady_gemv_ms": s["steady_gemv_ms"],
                    "peak_rss_mb": s["peak_rss_mb"],
                    "rss_high_water_mb": s.get("rss_high_water_mb") or float("nan"),
                }
                for mode, s in host["strategies"].items()
            ]
        )
        f = host["file"]
        print_table(
            raw,
            title=f"measured on this host: {f['bytes'] / MB:,.1f} MB INT4 file "
            f"({f['layers']} x {f['rows']}x{f['cols']}, g{f['group_size']})",
        )
        j = host["jit"]
        print(
            f"Numba matmul_w4 first call: {j['compile_ms']:,.0f} ms with an empty cache, "
            f"{j['cached_ms']:,.1f} ms from the on-disk cache. Eviction: fsync + "
            "posix_fadvise(DONTNEED), checked with mincore(2)."
        )
    return 0
