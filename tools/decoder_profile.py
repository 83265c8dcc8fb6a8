"""Per-op profile of one decode step of a decoder through our kernels, and its Python overhead.

    python tools/decoder_profile.py [--model smollm2-135m] [--policy int4-g32] [--threads 2]
                                    [--context 128] [--steps 50]

Runs `Llama.forward`'s decode step op by op (the same calls in the same order, each wrapped in
perf_counter), after a prefill of --context tokens, --steps times; prints the median
microseconds per op kind summed over layers, and the whole step untimed (Llama.decode) for
comparison: the difference between the sum of ops and the untimed step is the timer overhead,
and "python glue" is the untimed step minus the time inside kernels measured with empty calls.
Run under /work/bin/quiet for numbers worth reporting.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import numba
import numpy as np

from harmony_ref.compress import build_model
from harmony_ref.kernels.activation import silu_gate_rows
from harmony_ref.kernels.attention import decode_attention_unchecked
from harmony_ref.kernels.norm import add_rms_norm_rows, rms_norm_rows
from harmony_ref.kernels.rope import rope_rows
from harmony_ref.runtime.llama import Llama
from harmony_ref.runtime.loader import load_decoder


def timed_decode(m: Llama, token: int, acc: dict) -> np.ndarray:
    c = m.config
    pc = time.perf_counter
    qd, kvd, hd = c.q_dim, c.kv_dim, c.head_dim
    p0 = m.pos
    cos, sin = m.cos[p0 : p0 + 1], m.sin[p0 : p0 + 1]
    t0 = pc()
    x = m.embed[np.array([token])]
    h = rms_norm_rows(x, m.blocks[0].attn_norm, m.eps, np.empty_like(x))
    acc["embed+norm"] += pc() - t0
    for i, b in enumerate(m.blocks):
        t0 = pc()
        qkv = b.qkv(h)
        t1 = pc()
        if b.qkv_bias is not None:
            qkv += b.qkv_bias
        rope_rows(qkv, c.n_heads + c.n_kv_heads, hd, cos, sin)
        t2 = pc()
        b.cache.store(
            qkv[:, qd : qd + kvd].reshape(1, c.n_kv_heads, hd),
            qkv[:, qd + kvd :].reshape(1, c.n_kv_heads, hd),
        )
        t3 = pc()
        a = decode_attention_unchecked(qkv[0, :qd].reshape(c.n_heads, hd), b.cache)
        t4 = pc()
        o = b.o(a.reshape(1, qd))
        t5 = pc()
        add_rms_norm_rows(x, o, b.ffn_norm, m.eps, h)
        t6 = pc()
        gu = b.gate_up(h)
        t7 = pc()
        act = silu_gate_rows(gu, np.empty((1, c.ffn_dim), np.float32))
        t8 = pc()
        d = b.down(act)
        t9 = pc()
        nxt = m.blocks[i + 1].attn_norm if i + 1 < len(m.blocks) else m.final_norm
        add_rms_norm_rows(x, d, nxt, m.eps, h)
        t10 = pc()
        for name, dt in (
            ("qkv matmul", t1 - t0),
            ("rope", t2 - t1),
            ("kv store", t3 - t2),
            ("attention", t4 - t3),
            ("o matmul", t5 - t4),
            ("add+rmsnorm", t6 - t5),
            ("gate_up matmul", t7 - t6),
            ("silu-gate", t8 - t7),
            ("down matmul", t9 - t8),
            ("add+rmsnorm", t10 - t9),
        ):
            acc[name] += dt
    t0 = pc()
    logits = m.lm_head(h)
    acc["lm_head matmul"] += pc() - t0
    m.pos = p0 + 1
    return logits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--policy", default="int4-g32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    numba.set_num_threads(args.threads)
    w, tok = load_decoder(args.model)
    m = build_model(w, args.policy, max_context=args.context + 2 * args.steps + 8)
    prompt = np.arange(100, 100 + args.context)
    runs = defaultdict(list)
    whole = []
    for rep in range(2 * args.steps):  # interleave timed-op steps and whole untimed steps
        if m.pos + 2 > m.max_context or rep == 0:
            m.reset()
            m.prefill(prompt)
        if rep % 2:
            acc = defaultdict(float)
            timed_decode(m, 5, acc)
            for k, v in acc.items():
                runs[k].append(v)
        else:
            t0 = time.perf_counter()
            m.decode(5)
            whole.append(time.perf_counter() - t0)
    med = {k: float(np.median(v)) * 1e6 for k, v in runs.items()}
    total = sum(med.values())
    step = float(np.median(whole)) * 1e6
    print(
        f"decode step at context {args.context}, policy {args.policy}, {args.threads} threads, "
        f"{len(w.layers)} layers: untimed median {step:.0f} us = {1e6 / step:.1f} tokens/s"
    )
    for k, v in sorted(med.items(), key=lambda kv: -kv[1]):
        print(f"  {k:16s} {v:8.0f} us  {100 * v / total:5.1f} %")
    print(f"  {'sum of ops':16s} {total:8.0f} us (timers add ~{max(total - step, 0):.0f} us)")


if __name__ == "__main__":
    main()
