"""LM accuracy of many compressed policies (pruned, quantized, W8A8) against one FP32 reference,
one model in memory at a time: the reference's log-probabilities are computed once per chunk
and kept, then each policy's model is built (pruned, calibrated, quantized), scored on every
chunk and dropped. Scoring is eval/lm.py's (llama-perplexity's chunking and rule, PPL ratio,
KLD mean / p99, top-1 agreement) on the tokens given, which callers take from the corpus's
held-out split; W8A8 policies calibrate on the calibration split (compress/observe.py) or on
random ids, never on what is scored here.

    out = evaluate_policies(weights, tok.encode(load_corpus("heldout")), policies,
                            context=512, max_chunks=2)
    out["results"]["w8a8"]["kld_mean"]
"""

from __future__ import annotations

import time

import numpy as np

from harmony_ref.compress import compress
from harmony_ref.eval.lm import DEFAULT_CONTEXT, Scores, chunk_tokens, log_softmax
from harmony_ref.quant.policy import load_policy
from harmony_ref.runtime.llama import Llama, LlamaRef


def evaluate_policies(
    weights,
    tokens,
    policies,
    context: int = DEFAULT_CONTEXT,
    max_chunks: int | None = None,
    add_bos: bool = False,
    kv_dtype="fp16",
    calibration_tokens=None,
    progress=None,
) -> dict:
    """{"results": {"reference": ..., policy name: summary + build_s, weight_mb}, facts}.
    `progress(done, total, label, summary)` is called after the reference and each policy."""
    c = weights.config
    chunks = chunk_tokens(tokens, context, c.bos_id if add_bos else None)
    if max_chunks is not None:
        chunks = chunks[:max_chunks]
    first = context // 2
    pols = [load_policy(p) for p in policies]
    names = [p.name for p in pols]
    if len(set(names)) != len(names):
        raise ValueError(f"policy names must differ, got {names}")
    ref = LlamaRef(weights, max_context=context)
    ref_lp, ref_scores = [], Scores([], [], [])
    for chunk in chunks:
        ref.reset()
        lp = log_softmax(ref.prefill(chunk, all_logits=True)[first:-1])  # (S, V) float64
        target = chunk[first + 1 :]
        rows = np.arange(target.shape[0])
        ref_scores.add(-lp[rows, target], np.zeros(target.shape[0]), np.ones(target.shape[0], bool))
        ref_lp.append(lp)
    del ref
    ref_summary = ref_scores.summary(None)
    out = {"reference": ref_summary}
    total = len(pols) + 1
    if progress is not None:
        progress(1, total, "reference", ref_summary)
    for i, pol in enumerate(pols):
        t0 = time.perf_counter()
        model = Llama(
            compress(weights, pol, calibration_tokens), pol, kv_dtype, max_context=context
        )
        build_s = time.perf_counter() - t0
        s = Scores([], [], [])
        for chunk, lp_ref in zip(chunks, ref_lp):
            model.reset()
            lp = log_softmax(model.prefill(chunk, all_logits=True)[first:-1])
            target = chunk[first + 1 :]
            rows = np.arange(target.shape[0])
            kld = (np.exp(lp_ref) * (lp_ref - lp)).sum(axis=1)
            s.add(-lp[rows, target], kld, lp.argmax(axis=1) == lp_ref.argmax(axis=1))
        summary = s.summary(ref_summary["ppl"])
        wb = model.weight_bytes()
        summary.update(
            build_s=build_s,
            linear_weight_mb=wb["linear"] / 1e6,
            blocks=[(b.n_heads, b.n_kv_heads, b.ffn_dim) for b in model.blocks[:1]],
        )
        out[pol.name] = summary
        del model
        if progress is not None:
            progress(i + 2, total, pol.name, summary)
    return {
        "context": context,
        "chunks": int(len(chunks)),
        "tokens": int(len(tokens)),
        "scored_tokens_per_chunk": context - 1 - first,
        "results": out,
    }
