"""Decode tokens/s of a GGUF through our kernels beside llama.cpp's llama-bench on the same file
and thread count, interleaved in one run (a peer to compare against, never a dependency).

    /work/bin/quiet python tools/decoder_vs_llamacpp.py --llama-bin /path/to/llama.cpp/build/bin \
        [--model smollm2-135m | gemma3-270m | FILE.gguf] [--policy int4-g32 [--policy int8 ...]] \
        [--threads 2] [--tokens 64] [--phase tg|pp] [--depth 0] [--rounds 5] [--repack 0|1] [--json]

Each round runs `llama-bench -m GGUF -t T -p 0 -n N -r R --repack 0 -o json` (tg N: N tokens
generated from an empty context; with `--phase pp`, `-p N -n 0`: a prompt of N tokens; with
`--depth D`, `-d D`: after D tokens already in the context, which neither side times), then
ours: --repack 1 turns on llama.cpp's repacked CPU path (its weights re-laid out at load for its
AVX-512 / AMX kernels); the default stays 0 because the repacked path died with SIGILL in a KVM
guest (an earlier build on an Intel Xeon with AMX) and a comparison must run on every CPU it is
pointed at; on the AMD EPYC Zen 4 guest with build 0c1e570 it runs and changes llama.cpp's
decode by about 2 % (docs/explanations/decoders.md). Then ours: reset, one BOS token, then N decode steps through `Llama.decode`, timed as a
whole (N / seconds), R times (mean, like llama-bench's avg_ts), for each `--policy` in turn.
Prints the CPU, the per-round numbers, the medians and each policy's ratio (`--json`: the same as
one JSON object). The GGUF is the file llama.cpp runs as stored (Gemma 3 270M: its Q4_K_M mix);
ours runs the file's weights dequantized and re-quantized to each policy, or, with `--policy
as-stored`, the file's own tensors exactly as stored (the same bytes llama.cpp runs).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time

import numba
import numpy as np

from harmony_ref.compress import build_model
from harmony_ref.quant.policy import AS_STORED
from harmony_ref.runtime.llama import Llama
from harmony_ref.runtime.loader import load_decoder, resolve_model_path, stored_policy


def llama_bench(
    bin_dir: str,
    gguf: str,
    threads: int,
    n: int,
    reps: int,
    phase: str,
    repack: int = 0,
    depth: int = 0,
) -> float:
    """llama-bench's avg_ts of tg n (decode) or pp n (prefill) after `depth` tokens of context,
    its repacking `repack`."""
    r = subprocess.run(
        [
            f"{bin_dir}/llama-bench",
            "-m",
            gguf,
            "-t",
            str(threads),
            "-p",
            str(n if phase == "pp" else 0),
            "-n",
            str(n if phase == "tg" else 0),
            "-r",
            str(reps),
            "--repack",
            str(repack),
            "-d",
            str(depth),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = json.loads(r.stdout)
    return float(rows[0]["avg_ts"])


def _context(m: Llama, depth: int, vocab: int, bos: int) -> None:
    """An empty cache, then `depth` tokens of context (fixed pseudo-random ids), untimed."""
    m.reset()
    if depth:
        m.prefill([bos] + [int(t) for t in np.random.default_rng(1).integers(1, vocab, depth - 1)])


def ours_tg(m: Llama, n: int, bos: int, depth: int = 0, vocab: int = 0) -> float:
    _context(m, depth, vocab, bos)
    t0 = time.perf_counter()
    tok = bos
    m.decode(tok)
    for _ in range(n - 1):
        tok = int(np.argmax(m.decode(tok)))
    return n / (time.perf_counter() - t0)


def ours_pp(m: Llama, n: int, vocab: int, depth: int = 0, bos: int = 0) -> float:
    """Prefill of n tokens (fixed pseudo-random ids, as llama-bench's pp uses random tokens)."""
    ids = [int(t) for t in np.random.default_rng(0).integers(1, vocab, n)]
    _context(m, depth, vocab, bos)
    t0 = time.perf_counter()
    m.prefill(ids)
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bin", required=True)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument(
        "--policy",
        action="append",
        help="ours; repeat to interleave several "
        "(default int4-g32; as-stored: the GGUF's own tensors)",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument(
        "--phase", choices=("tg", "pp"), default="tg", help="tg: decode N tokens; pp: prefill N"
    )
    ap.add_argument(
        "--depth", type=int, default=0, help="tokens already in the context (llama-bench -d)"
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3, help="llama-bench -r per round, and ours")
    ap.add_argument(
        "--repack",
        type=int,
        choices=(0, 1),
        default=0,
        help="llama-bench --repack (default 0: see the module doc)",
    )
    args = ap.parse_args()
    policies = args.policy or ["int4-g32"]
    numba.set_num_threads(args.threads)
    gguf = str(resolve_model_path(args.model))
    as_stored = AS_STORED in policies
    w, tok = load_decoder(args.model, keep_stored=as_stored)
    bos = w.config.bos_id or 0
    stored = stored_policy(w, args.model) if as_stored else None
    models = {
        p: build_model(w, stored if p == AS_STORED else p, max_context=args.depth + args.tokens + 8)
        for p in policies
    }
    vocab = w.config.vocab_size

    def ours(m: Llama) -> float:
        return (
            ours_pp(m, args.tokens, vocab, args.depth, bos)
            if args.phase == "pp"
            else ours_tg(m, args.tokens, bos, args.depth, vocab)
        )

    for m in models.values():
        ours_tg(m, 8, bos, args.depth, vocab)  # compile / warm up
        ours_pp(m, 8, vocab, args.depth, bos)
    theirs, mine = [], {p: [] for p in policies}
    cpu = cpu_name()
    if not args.json:
        print(
            f"CPU: {cpu}; {args.threads} threads; llama.cpp --repack {args.repack}; "
            f"model {args.model} ({gguf})",
            flush=True,
        )
    for r in range(args.rounds):
        theirs.append(
            llama_bench(
                args.llama_bin,
                gguf,
                args.threads,
                args.tokens,
                args.reps,
                args.phase,
                args.repack,
                args.depth,
            )
        )
        for p, m in models.items():
            mine[p].append(float(np.mean([ours(m) for _ in range(args.reps)])))
        if not args.json:
            print(
                f"round {r}: llama.cpp {theirs[-1]:.1f} tokens/s, "
                + ", ".join(f"ours ({p}) {mine[p][-1]:.1f}" for p in policies),
                flush=True,
            )
    a = float(np.median(theirs))
    out = {
        "cpu": cpu,
        "threads": args.threads,
        "model": args.model,
        "gguf": gguf,
        "phase": args.phase,
        "tokens": args.tokens,
        "depth": args.depth,
        "rounds": args.rounds,
        "reps": args.reps,
        "repack": args.repack,
        "llama_cpp": theirs,
        "llama_cpp_median": a,
        "ours": {
            p: {
                "runs": v,
                "median": float(np.median(v)),
                "ratio_to_llama_cpp": float(np.median(v)) / a,
            }
            for p, v in mine.items()
        },
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return
    for p in policies:
        b = out["ours"][p]["median"]
        print(
            f"median {'decode' if args.phase == 'tg' else 'prefill'} tokens/s at {args.threads} "
            f"threads, {args.phase}{args.tokens}"
            + (f" at depth {args.depth}" if args.depth else "")
            + f": llama.cpp "
            f"{a:.1f}, ours ({p}) {b:.1f}, ratio ours/llama.cpp {b / a:.2f}"
        )


def cpu_name() -> str:
    """lscpu's model name with family/model, else platform's processor string."""
    try:
        info = dict(
            line.split(":", 1)
            for line in subprocess.run(
                ["lscpu"], capture_output=True, text=True
            ).stdout.splitlines()
            if ":" in line
        )
        return (
            f"{info['Model name'].strip()} (family {info['CPU family'].strip()}, model "
            f"{info['Model'].strip()})"
        )
    except (OSError, KeyError):
        return platform.processor() or "unknown"


if __name__ == "__main__":
    main()
