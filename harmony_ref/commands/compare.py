"""`harmony-ref compare`: one model and policy predicted on several device profiles, side by side
(metrics as rows, one column per profile on a runtime, `profile · runtime`, best value marked),
optionally as a PNG: small multiples of the key metrics in their own units, or every metric
normalised on one page. `--runtime R` runs every profile on R; `PROFILE:RUNTIME` items choose
per column (one phone may take several); one line above the table says when the columns differ
in runtime (track/compare.py)."""

from __future__ import annotations

NAME = "compare"
HELP = "compare device profiles for one model/policy (table, md, csv, json; --plot PNG)"

DEFAULT_PROFILES = "harmony-flagship,harmony-midrange,harmony-lowend"


def add_arguments(p) -> None:
    p.add_argument(
        "--profiles",
        default=DEFAULT_PROFILES,
        help="comma-separated PROFILE or PROFILE:RUNTIME (one phone on a chosen runtime; a phone "
        f"may be listed on several; default {DEFAULT_PROFILES})",
    )
    from harmony_ref.commands._args import (
        add_model_arguments,
        add_renamed,
        add_runtime_argument,
        add_scenario_arguments,
    )

    add_model_arguments(p, profile=None, checkpoints=True)
    add_runtime_argument(
        p,
        help="run every profile on this runtime profile (llama.cpp-cpu, executorch-xnnpack, "
        "qnn-npu, mlc-gpu, mslite-npu, or a .toml); default: each profile's own",
    )

    add_scenario_arguments(p, batch=1, long_dest=True)
    add_renamed(
        p, "--style", choices=("table", "md", "csv", "json"), default="table", help="report style"
    )
    p.add_argument("--json", action="store_true", help="same as --style json")
    p.add_argument(
        "--plot", metavar="PNG", help="also write a PNG: one panel per metric, in its own unit"
    )
    p.add_argument(
        "--metrics",
        metavar="A,B,...",
        help="with --plot: the metrics to draw, one panel each (default: "
        "ttft_ms, decode_tokens_per_s, peak_memory_mb, sustained_peak_ratio_10min,"
        " energy_per_token_mj, coldstart_cold_ms)",
    )
    p.add_argument(
        "--plot-view",
        choices=("panels", "normalised"),
        default="panels",
        help="with --plot: 'panels' (default) or 'normalised' (every metric on one "
        "axis as a share of its largest value, real values printed)",
    )


def run(args) -> int:
    import sys

    from harmony_ref.commands._output import print_table
    from harmony_ref.job.compare_run import compare_profiles
    from harmony_ref.track.compare import (
        LABEL_SEP,
        compare_columns,
        marked_frame,
        runtime_note,
        to_markdown,
    )

    if args.plot:
        from harmony_ref._io import check_plot_file

        check_plot_file(args.plot)
    from harmony_ref.runtime.loader import resolve_model

    profiles = [s.strip() for s in args.profiles.split(",") if s.strip()]
    metrics = _plot_metrics(args)
    columns = compare_columns(profiles, args.runtime)  # a refused runtime: exit 2, before work
    note = runtime_note(columns)
    model = resolve_model(args.model)[0]
    frame, notes = compare_profiles(
        profiles,
        model,
        args.policy,
        args.prompt_tokens,
        args.new_tokens,
        args.context_tokens,
        args.batch,
        runtime=args.runtime,
    )
    if metrics is not None:
        unknown = [m for m in metrics if m not in frame.index]
        if unknown:
            raise ValueError(
                f"--metrics: {', '.join(unknown)} not in this comparison; it has: "
                + ", ".join(frame.index)
            )
    fmt = "json" if args.json else args.style
    title = (
        f"{args.model}, policy {args.policy}: {args.prompt_tokens} prompt + "
        f"{args.new_tokens} new tokens, context {args.context_tokens}, batch {args.batch}"
    )
    if fmt == "table":
        if note:
            print(f"note: {note}")
        print_table(marked_frame(frame), title=title)
        print(
            "* best value of the row (direction-aware; rows with better=none or a tie across all profiles are not marked)"
        )
    elif fmt == "md":
        print((f"> note: {note}\n\n" if note else "") + to_markdown(frame), end="")
    elif fmt == "csv":
        if note:  # stdout stays one CSV table
            print(f"note: {note}", file=sys.stderr)
        sys.stdout.write(frame.to_csv())
    else:
        out = {
            "model": args.model,
            "policy": args.policy,
            "profiles": [c.profile for c in columns],
            "columns": [
                {"label": c.label, "profile": c.profile, "runtime": c.runtime or None}
                for c in columns
            ],
            "runtime_note": note or None,
            "metrics": [
                {
                    "metric": name,
                    **{k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()},
                }
                for name, row in frame.to_dict(orient="index").items()
            ],
            "notes": notes,
        }
        from harmony_ref.commands._output import print_json

        print_json(out)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.plot:
        runtimes = list(dict.fromkeys(c.label.partition(LABEL_SEP)[2] for c in columns))
        phones = list(dict.fromkeys(c.profile for c in columns))
        on = (
            f"on {runtimes[0]}"
            if len(runtimes) == 1
            else f"{phones[0]} on {len(runtimes)} runtimes"
            if len(phones) == 1
            else "runtimes differ by column"
        )
        path = _plot(args, model, frame, profiles, metrics, f"{title}, {on} (device model)")
        print(f"plot: {path}", file=sys.stderr)
    return 0


def _plot_metrics(args) -> list[str] | None:
    """The --metrics list (checked for form before any work), None for the default panels."""
    if args.metrics is None:
        return None
    if not args.plot:
        raise ValueError("--metrics: picks the panels of --plot; give --plot PNG too")
    if args.plot_view != "panels":
        raise ValueError(
            "--metrics: the normalised view draws every metric; use --plot-view panels"
        )
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    if not metrics:
        raise ValueError(f"--metrics {args.metrics!r}: give at least one metric name")
    twice = sorted({m for m in metrics if metrics.count(m) > 1})
    if twice:
        raise ValueError(f"--metrics: listed twice: {', '.join(twice)}")
    return metrics


def _plot(args, model, frame, profiles, metrics, title):
    from harmony_ref.track.compare import coldstart_phases
    from harmony_ref.track.plots import (
        DEFAULT_PANELS,
        coldstart_strategy,
        compare_panels,
        profile_bars,
    )

    if args.plot_view == "normalised":
        return profile_bars(frame, args.plot, title)
    if metrics is None:  # the default panels a comparison has (a part may not have run)
        metrics = [m for m in DEFAULT_PANELS if m in frame.index]
    phases = None
    if any(coldstart_strategy(m) for m in metrics):
        phases = coldstart_phases(
            profiles,
            model,
            args.policy,
            args.prompt_tokens,
            args.new_tokens,
            args.context_tokens,
            args.batch,
            runtime=args.runtime,
        )
    return compare_panels(frame, args.plot, title, metrics, phases)
