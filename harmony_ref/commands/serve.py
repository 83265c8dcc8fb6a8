"""`harmony-ref serve`: requests arriving at one on-device session (bounded queue, timeouts)."""

from __future__ import annotations

NAME = "serve"
HELP = (
    "simulate requests (Poisson or a trace) at one on-device session: latency and TTFT "
    "percentiles, busy and timeout rates, utilisation"
)


def add_arguments(p) -> None:
    from harmony_ref.commands._args import add_model_arguments, add_scenario_arguments, number
    from harmony_ref.commands._output import add_json_flag
    from harmony_ref.device.serve import DEFAULT_QUEUE_LIMIT, DEFAULT_TIMEOUT_S

    p.add_argument(
        "--rate",
        type=number(0, above=True),
        default=0.2,
        help="Poisson arrivals per second (default 0.2)",
    )
    p.add_argument(
        "--minutes",
        type=number(0, above=True),
        help="arrival window in minutes (default 10; with --trace: the trace's own span)",
    )
    p.add_argument(
        "--trace",
        metavar="CSV",
        help="arrival_s,prompt_tokens,new_tokens per line (replaces --rate)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="RNG seed of the Poisson arrivals (default 0)"
    )
    p.add_argument(
        "--queue",
        type=int,
        default=DEFAULT_QUEUE_LIMIT,
        help=f"requests allowed to wait (default {DEFAULT_QUEUE_LIMIT})",
    )
    p.add_argument(
        "--timeout-s",
        type=number(0, above=True),
        default=DEFAULT_TIMEOUT_S,
        help=f"per-request timeout from arrival (default {DEFAULT_TIMEOUT_S:g})",
    )
    add_model_arguments(p, checkpoints=True)
    add_scenario_arguments(p, context=None, what="per Poisson request")
    from harmony_ref.device.chat import OVERFLOW

    g = p.add_argument_group("sessions and prefix reuse (device/chat.py)")
    g.add_argument(
        "--prefix-tokens",
        type=int,
        default=0,
        help="shared system prompt before every conversation, cached once (default 0)",
    )
    g.add_argument(
        "--sessions",
        type=int,
        default=0,
        help="conversations the requests belong to (uniform, seeded); 0 = no session "
        "cache (default)",
    )
    g.add_argument(
        "--kv-budget-tokens",
        type=int,
        default=8192,
        help="KV positions the session cache may hold, prefix included (default 8192)",
    )
    g.add_argument(
        "--context-limit",
        type=int,
        default=4096,
        help="a request past prefix + history + prompt + new > this is handled by "
        "--overflow (default 4096)",
    )
    g.add_argument(
        "--overflow",
        choices=OVERFLOW,
        default="truncate",
        help="past the context limit: drop the history (truncate) or refuse (default truncate)",
    )
    p.add_argument(
        "--plot",
        metavar="PNG",
        help="write each request's latency by arrival time and the wait queue",
    )
    from harmony_ref.commands._args import add_allow_unmatched

    add_allow_unmatched(p)
    add_json_flag(p)


def run(args) -> int:
    import math

    import pandas as pd

    from harmony_ref.commands._output import print_json, print_table
    from harmony_ref.config import RunConfig, fitting_context
    from harmony_ref.device.runtime import load_profile
    from harmony_ref.device.serve_run import run_serving
    from harmony_ref.units import MS_PER_S

    for flag, value in (
        ("--rate", args.rate),
        ("--minutes", args.minutes),
        ("--timeout-s", args.timeout_s),
    ):
        if value is not None and not (0 < value < math.inf):
            raise ValueError(f"{flag} {value}: must be finite and > 0")
    if args.queue < 0:
        raise ValueError(f"--queue {args.queue}: must be >= 0")
    if args.sessions < 0:
        raise ValueError(f"--sessions {args.sessions}: must be >= 0")
    # checked with or without --sessions (without, they were ignored, whatever their value)
    if args.kv_budget_tokens < 1:
        raise ValueError(f"--kv-budget-tokens {args.kv_budget_tokens}: must be >= 1")
    if args.context_limit < 2:
        raise ValueError(f"--context-limit {args.context_limit}: must be >= 2")
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
    served = run_serving(
        profile,
        config,
        trace=args.trace,
        rate=args.rate,
        minutes=args.minutes,
        seed=args.seed,
        queue_limit=args.queue,
        timeout_s=args.timeout_s,
        sessions=args.sessions,
        prefix_tokens=args.prefix_tokens,
        kv_budget_tokens=args.kv_budget_tokens,
        context_limit=args.context_limit,
        overflow=args.overflow,
        keep_outcomes=bool(args.plot),
    )
    result, source, typical = served.result, served.source, served.typical
    summary, metrics, session_summary = result.summary(), served.metrics, served.sessions
    info = {
        "profile": profile.name,
        "model": config.spec.name,
        "policy": config.policy.name,
        "arrivals": source,
        "service_ttft_ms": typical.ttft_s * MS_PER_S,
        "service_e2e_ms": typical.total_s * MS_PER_S,
    }
    if args.plot:
        from harmony_ref.track.plots import serve_plot

        serve_plot(
            result,
            f"{profile.name}, {config.spec.name} {config.policy.name}; {source}; "
            f"queue {args.queue}, timeout {args.timeout_s:g} s",
            args.plot,
        )
    if args.json:
        print_json(
            {
                **info,
                "summary": summary,
                "metrics": metrics.to_dict(),
                "plot": args.plot,
                **({"sessions": session_summary} if session_summary else {}),
            }
        )
        return 0
    print(
        f"{profile.name}, {config.spec.name} {config.policy.name}; arrivals: {source}; one "
        f"session, queue {args.queue}, timeout {args.timeout_s:g} s"
    )
    print(
        f"service time of a {args.prompt}+{args.new} request on the device model: "
        f"TTFT {typical.ttft_s * MS_PER_S:,.0f} ms, end to end {typical.total_s * MS_PER_S:,.0f} ms"
    )
    rows = [
        {"metric": k, "value": (float("nan") if v is None else float(v))}
        for k, v in summary.items()
    ]
    print_table(pd.DataFrame(rows), title="serving summary")
    print(
        "latency: completed requests; TTFT: every request that got a first token (including "
        "ones cut off later); busy/timeout rates: fraction of arrivals"
    )
    if session_summary:
        ss = session_summary
        rows = [
            {"metric": k, "value": (float("nan") if v is None else float(v))} for k, v in ss.items()
        ]
        print_table(
            pd.DataFrame(rows),
            title=f"session KV cache: prefix {args.prefix_tokens}, "
            f"{args.sessions or 'no'} sessions, budget "
            f"{args.kv_budget_tokens} tokens, context limit "
            f"{args.context_limit} ({args.overflow})",
        )
        if ss["ttft_reuse_mean_ms"] is not None:
            print(
                f"service TTFT (no queueing), mean over {ss['hits'] + ss['misses']} admitted "
                f"requests: {ss['ttft_reuse_mean_ms']:,.0f} ms with reuse vs "
                f"{ss['ttft_no_reuse_mean_ms']:,.0f} ms prefilling everything again"
            )
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0
