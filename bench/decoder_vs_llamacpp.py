"""Decode tokens/s of a GGUF through our kernels beside llama.cpp's llama-bench on the same file
and thread count, interleaved in one run (a peer to compare against, never a dependency).

    /work/bin/quiet python bench/decoder_vs_llamacpp.py --llama-bin /path/to/llama.cpp/build/bin \
        [--model smollm2-135m] [--policy int4-g32] [--threads 2] [--tokens 64] [--rounds 5]

Each round runs `llama-bench -m GGUF -t T -p 0 -n N -r R --repack 0 -o json` (tg N: N tokens
generated from an empty context, --repack 0 because this KVM guest faults on the AMX/repacked
path), then ours: reset, one BOS token, then N decode steps through `Llama.decode`, timed as a
whole (N / seconds), R times (mean, like llama-bench's avg_ts). Prints the per-round numbers, the medians and their ratio.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time

import numba
import numpy as np

from harmony_ref.runtime.llama import Llama
from harmony_ref.runtime.loader import load_decoder, resolve_model_path


def llama_bench_tg(bin_dir: str, gguf: str, threads: int, n: int, reps: int) -> float:
    r = subprocess.run([f"{bin_dir}/llama-bench", "-m", gguf, "-t", str(threads), "-p", "0",
                        "-n", str(n), "-r", str(reps), "--repack", "0", "-o", "json"],
                       capture_output=True, text=True, check=True)
    rows = json.loads(r.stdout)
    return float(rows[0]["avg_ts"])


def ours_tg(m: Llama, n: int, bos: int) -> float:
    m.reset()
    t0 = time.perf_counter()
    tok = bos
    m.decode(tok)
    for _ in range(n - 1):
        tok = int(np.argmax(m.decode(tok)))
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bin", required=True)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--policy", default="int4-g32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3, help="llama-bench -r per round, and ours")
    args = ap.parse_args()
    numba.set_num_threads(args.threads)
    gguf = str(resolve_model_path(args.model))
    w, tok = load_decoder(args.model)
    m = Llama(w, args.policy, max_context=args.tokens + 8)
    ours_tg(m, 8, w.config.bos_id or 0)  # compile / warm up
    theirs, mine = [], []
    for r in range(args.rounds):
        theirs.append(llama_bench_tg(args.llama_bin, gguf, args.threads, args.tokens, args.reps))
        mine.append(float(np.mean([ours_tg(m, args.tokens, w.config.bos_id or 0)
                                   for _ in range(args.reps)])))
        print(f"round {r}: llama.cpp {theirs[-1]:.1f} tokens/s, ours ({args.policy}) "
              f"{mine[-1]:.1f} tokens/s", flush=True)
    a, b = float(np.median(theirs)), float(np.median(mine))
    print(f"median decode tokens/s at {args.threads} threads, tg{args.tokens}: llama.cpp {a:.1f}, "
          f"ours {b:.1f}, ratio ours/llama.cpp {b / a:.2f}")


if __name__ == "__main__":
    main()
