"""`harmony-ref generate`: text from a real decoder (SmolLM2-135M by default) through our kernels
under a quantization policy, then its timings: TTFT, prefill and decode tokens/s, peak RSS."""

from __future__ import annotations

NAME = "generate"
HELP = "generate text with a real decoder (GGUF / HF checkpoint) on our INT4/INT8 kernels"


def add_arguments(p) -> None:
    from harmony_ref.commands._args import add_checkpoint_argument, number
    from harmony_ref.commands._output import add_json_flag

    add_checkpoint_argument(p)
    p.add_argument(
        "--policy",
        default="int4-g32",
        help="shipped policy name or TOML path, 'reference' for the NumPy FP32 "
        "oracle, or 'as-stored' for a GGUF file's tensors exactly as stored "
        "(default: int4-g32)",
    )
    p.add_argument("--prompt", required=True, help="the prompt text")
    p.add_argument(
        "--chat",
        action="store_true",
        help="wrap the prompt as one user message in the checkpoint's chat template",
    )
    p.add_argument("--max-new", type=int, default=64, metavar="N", help="tokens to generate (64)")
    p.add_argument(
        "--threads", type=int, default=None, metavar="N", help="kernel threads (default: all cores)"
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        metavar="S",
        help="sample with this seed (default: greedy)",
    )
    p.add_argument(
        "--temperature",
        type=number(0),
        default=None,
        help="sampling temperature (default 0.8 with --seed, else greedy)",
    )
    p.add_argument("--top-k", type=int, default=40, help="top-k when sampling (40; 0: off)")
    p.add_argument(
        "--top-p", type=number(0, 1, above=True), default=0.95, help="top-p when sampling (0.95)"
    )
    p.add_argument("--kv", choices=["fp16", "int8"], default="fp16", help="KV cache dtype")
    from harmony_ref.commands._args import add_allow_unmatched

    add_allow_unmatched(p)
    add_json_flag(p)


def run(args) -> int:
    import sys

    import numba

    from harmony_ref.commands._output import print_json
    from harmony_ref.compress import build_model
    from harmony_ref.runtime.generate import Sampler, generate
    from harmony_ref.runtime.loader import load_decoder, model_label

    if args.max_new < 1:
        raise ValueError(f"--max-new must be >= 1, got {args.max_new}")
    if args.threads is not None:
        if not 1 <= args.threads <= numba.config.NUMBA_NUM_THREADS:
            raise ValueError(
                f"--threads must be in 1..{numba.config.NUMBA_NUM_THREADS}, got {args.threads}"
            )
        numba.set_num_threads(args.threads)
    if args.seed is None and args.temperature not in (None, 0):
        raise ValueError("--temperature needs --seed (sampling is always seeded)")
    temperature = (
        0.0 if args.seed is None else (0.8 if args.temperature is None else args.temperature)
    )
    sampler = Sampler(
        temperature, args.top_k if temperature else 0, args.top_p if temperature else 1.0, args.seed
    )

    from harmony_ref.quant.policy import AS_STORED

    as_stored = args.policy == AS_STORED
    if args.policy != "reference" and not as_stored:
        from harmony_ref.commands._args import check_policies
        from harmony_ref.runtime.loader import checkpoint_spec

        check_policies([args.policy], checkpoint_spec(args.model), args.allow_unmatched)
    weights, tok = load_decoder(args.model, keep_stored=as_stored)
    policy = args.policy
    if as_stored:  # a GGUF file's tensors exactly as stored, as llama.cpp runs them
        from harmony_ref.runtime.loader import stored_policy

        policy = stored_policy(weights, args.model)
    text = args.prompt
    if args.chat:
        text = tok.apply_chat_template([{"role": "user", "content": args.prompt}])
    ids = tok.encode(text)
    max_context = min(weights.config.max_positions, len(ids) + args.max_new)
    model = build_model(weights, policy, args.kv, max_context)
    stream = None
    if not args.json:
        decoded = []

        def stream(token):  # print as we go, decoding whole so multi-byte characters join
            decoded.append(token)
            piece = tok.decode(decoded, skip_special=True)
            if not piece.endswith("\ufffd"):
                sys.stdout.write(piece[stream.printed :])
                sys.stdout.flush()
                stream.printed = len(piece)

        stream.printed = 0
    g = generate(model, ids, args.max_new, sampler, tok.eog_ids, on_token=stream)
    completion = tok.decode(g.tokens, skip_special=True)
    metrics = g.metrics()
    info = {
        "model": model_label(args.model, weights),
        "policy": model.name,
        "threads": numba.get_num_threads(),
        "sampling": "greedy"
        if sampler.greedy
        else f"temperature {sampler.temperature}, top-k {sampler.top_k}, top-p {sampler.top_p}, "
        f"seed {sampler.seed}",
    }
    if args.json:
        print_json({**info, "prompt": text, "completion": completion, **metrics})
        return 0
    if stream.printed < len(completion):
        sys.stdout.write(completion[stream.printed :])
    print()
    print(
        f"--- {info['model']}, policy {info['policy']}, {info['threads']} threads, "
        f"{info['sampling']}"
    )
    stop = "EOS" if g.stopped_at_eos else f"max-new {args.max_new}"
    print(
        f"prompt {metrics['prompt_tokens']} tokens, generated {metrics['new_tokens']} "
        f"(stopped at {stop})"
    )
    print(
        f"TTFT {metrics['ttft_ms']:.1f} ms | prefill {metrics['prefill_tokens_per_s']:.1f} "
        f"tokens/s | decode {metrics['decode_tokens_per_s']:.1f} tokens/s | peak RSS "
        f"{metrics['peak_rss_mb']:.0f} MB"
    )
    return 0
