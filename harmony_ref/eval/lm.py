"""Language-model accuracy of a decoder under a quantization policy, measured against its FP32
reference the way llama.cpp's `llama-perplexity --kl-divergence` measures a quantized model
against its base: perplexity and its ratio to FP32, mean and 99th-percentile KL divergence,
top-1 agreement, on chunks of a stated context scoring the second half of each chunk.

    text = load_corpus("heldout")                 # SHA-256 checked
    table = evaluate_lm(weights, tok.encode(text), context=512,
                        variants=[("int4-g32", "fp16"), ("int4-g32", "int8")])

llama-perplexity's rule, reproduced: the text is tokenized once (BOS first when the model adds
one), cut into floor(n / context) chunks of `context` tokens (the remainder is dropped), each
chunk is evaluated from an empty KV cache (its first token replaced by BOS when the model adds
one), and the logits at positions first = context / 2 .. context - 2 score the next token, so
each chunk scores context - 1 - first tokens. PPL = exp(mean NLL); ratio = PPL / PPL_fp32;
KL(p_fp32 || p_policy) per scored token, its mean and 99th percentile; top-1 agreement = % of
scored tokens whose argmax equals the reference's. The reference is `LlamaRef` (NumPy FP32,
float32 KV cache) over the checkpoint's weights dequantized exactly.

The shipped corpus (harmony_ref/data/lm_corpus/) was written for this project: `heldout.txt`
(prose, dialogue, numbers, code; ~6,500 SmolLM2 tokens) scores; `calibration.txt` (~1,600
tokens, different texts) is for calibrating activation scales and planning, and never scores.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

import numpy as np

from harmony_ref.compress import compress
from harmony_ref.runtime.llama import Llama, LlamaRef

CORPUS_DIR = "lm_corpus"
CORPUS_SHA256 = {
    "heldout": "9001a9bfd8e0156844f2a4137d2dcd0eb93a71d7722e93f7f7b890acaba1fdb6",
    "calibration": "e950a9dacfb3d219cde8321763adcb03c3c614173141b5741f6736fa999cf2a1",
}
DEFAULT_CONTEXT = 512
KLD_PERCENTILE = 99.0


def load_corpus(part: str = "heldout") -> str:
    """A shipped corpus part, its SHA-256 checked (ValueError on mismatch)."""
    if part not in CORPUS_SHA256:
        raise ValueError(f"corpus part must be one of {sorted(CORPUS_SHA256)}, got {part!r}")
    data = (resources.files("harmony_ref") / "data" / CORPUS_DIR / f"{part}.txt").read_bytes()
    got = hashlib.sha256(data).hexdigest()
    if got != CORPUS_SHA256[part]:
        raise ValueError(
            f"harmony_ref/data/{CORPUS_DIR}/{part}.txt has SHA-256 {got}, expected "
            f"{CORPUS_SHA256[part]}: the shipped corpus was modified"
        )
    return data.decode("utf-8")


def check_scoring(
    context: int, chunks: int | None, context_name: str = "--context", chunks_name: str = "--chunks"
) -> None:
    """The chunking's token counts, checked (ValueError naming the flag or argument): an even
    context of at least 4 (half of each chunk scored, at least one token), at least one chunk
    when a number of chunks is asked for. Every scoring command checks them here, before its work."""
    if context < 4 or context % 2:
        raise ValueError(f"{context_name} {context}: must be an even number >= 4")
    if chunks is not None and chunks < 1:
        raise ValueError(f"{chunks_name} {chunks}: must be >= 1")


def chunk_tokens(tokens, context: int, bos_id: int | None = None) -> np.ndarray:
    """(n_chunks, context) int64, llama-perplexity's chunking (see the module doc)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    check_scoring(context, None, "context")
    n = tokens.shape[0] // context
    if n < 1:
        raise ValueError(
            f"the text has {tokens.shape[0]} tokens, fewer than one chunk of context {context}"
        )
    chunks = tokens[: n * context].reshape(n, context).copy()
    if bos_id is not None:
        chunks[:, 0] = bos_id
    return chunks


def unscored_tokens(tokens, context: int, n_chunks: int) -> np.ndarray:
    """The tokens of `tokens` that scoring its first `n_chunks` chunks never scores: each
    chunk's context half (positions 0 .. context // 2, whose predictions are not scored) and
    everything after the last chunk, in text order. Calibrating on these (W8A8 scales,
    activation norms) keeps every scored token out of what it is scored with."""
    tokens = np.asarray(tokens, dtype=np.int64)
    first = context // 2
    parts = [tokens[c * context : c * context + first + 1] for c in range(n_chunks)]
    return np.concatenate(parts + [tokens[n_chunks * context :]])


def log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    z -= z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


@dataclass
class Scores:
    """Per scored token: NLL, KL to the reference, top-1 agreement (reference rows: KL 0)."""

    nll: list
    kld: list
    top1: list

    def add(self, nll, kld, top1):
        self.nll.append(nll)
        self.kld.append(kld)
        self.top1.append(top1)

    def summary(self, ref_ppl: float | None) -> dict:
        nll, kld, top1 = (np.concatenate(a) for a in (self.nll, self.kld, self.top1))
        ppl = float(np.exp(nll.mean()))
        out = {
            "ppl": ppl,
            "ppl_ratio": ppl / ref_ppl if ref_ppl else 1.0,
            "kld_mean": float(kld.mean()),
            f"kld_p{KLD_PERCENTILE:g}": float(np.percentile(kld, KLD_PERCENTILE)),
            "top1_agreement_pct": 100.0 * float(top1.mean()),
            "scored_tokens": int(nll.size),
        }
        bad = [k for k, v in out.items() if isinstance(v, float) and not np.isfinite(v)]
        if bad:
            raise ValueError(f"LM metrics not finite: {', '.join(bad)} ({out})")
        return out


def evaluate_lm(
    weights,
    tokens,
    context: int = DEFAULT_CONTEXT,
    variants=(("fp32", "fp16"),),
    add_bos: bool = False,
    progress=None,
    max_chunks: int | None = None,
    reference_cache=None,
    calibration_tokens=None,
    programs=(),
) -> dict:
    """{"reference": summary, "<policy>[+kv-int8]": summary, ...} plus run facts.

    variants: (policy name or Policy, kv dtype) pairs, each run on the kernel path. `progress`,
    if given, is called with (chunks done, chunks total) after every chunk. `max_chunks`: score
    only the first N chunks. `reference_cache` (eval/lm_cache.py's ReferenceCache): the FP32
    reference's log-probs are read from it when there and written to it when not; cached or
    not, they are rounded to float32 the same way, so a cached run gives the same numbers.
    `calibration_tokens`: the text a variant with [activations] or an activation pruning score
    calibrates on (default: the corpus's calibration split, compress/observe.py).
    `programs`: other runtimes' models scored the same way after the variants (runtime/pte.py
    PteProgram: its `name`, `reset()` and `prefill(chunk, all_logits=True)`), each a row."""
    c = weights.config
    chunks = chunk_tokens(tokens, context, c.bos_id if add_bos else None)
    total_chunks = len(chunks)
    if max_chunks is not None:
        check_scoring(context, max_chunks, "context", "max_chunks")
        chunks = chunks[:max_chunks]
    first = context // 2
    n_scored = context - 1 - first
    ref = None
    models = [
        Llama(compress(weights, p, calibration_tokens), p, kv, max_context=context)
        for p, kv in variants
    ] + list(programs)
    scores = {"reference": Scores([], [], [])} | {m.name: Scores([], [], []) for m in models}
    cached = 0
    for ci, chunk in enumerate(chunks):
        target = chunk[first + 1 :]  # (context - 1 - first,)
        lp_ref = None
        if reference_cache is not None:
            lp_ref = reference_cache.get(ci, (n_scored, c.vocab_size))
        if lp_ref is None:
            if ref is None:
                ref = LlamaRef(weights, max_context=context)
            ref.reset()
            lp_ref = log_softmax(ref.prefill(chunk, all_logits=True)[first:-1]).astype(np.float32)
            if reference_cache is not None:
                reference_cache.put(ci, lp_ref)
        else:
            cached += 1
        lp_ref = lp_ref.astype(np.float64)  # (S, V)
        top_ref = lp_ref.argmax(axis=1)
        rows = np.arange(target.shape[0])
        scores["reference"].add(
            -lp_ref[rows, target], np.zeros(target.shape[0]), np.ones(target.shape[0], bool)
        )
        p_ref = np.exp(lp_ref)
        for m in models:
            m.reset()
            lp = log_softmax(m.prefill(chunk, all_logits=True)[first:-1])
            kld = (p_ref * (lp_ref - lp)).sum(axis=1)
            scores[m.name].add(-lp[rows, target], kld, lp.argmax(axis=1) == top_ref)
        if progress is not None:
            progress(ci + 1, len(chunks))
    ref_summary = scores["reference"].summary(None)
    out = {"reference": ref_summary}
    for name, s in scores.items():
        if name != "reference":
            out[name] = s.summary(ref_summary["ppl"])
    return {
        "context": context,
        "chunks": int(len(chunks)),
        "chunks_in_text": int(total_chunks),
        "tokens": int(len(tokens)),
        "scored_tokens_per_chunk": n_scored,
        "reference_chunks_cached": cached,
        "results": out,
    }


LAYER_TYPES = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
    "lm_head",
)


def one_type_policies(fmt: str = "int4-g32"):
    """One policy per Linear type: that type alone in `fmt`, everything else FP32 (the
    per-layer-type sensitivity)."""
    from harmony_ref.quant.policy import policy_from_dict

    out = []
    for t in LAYER_TYPES:
        pattern = "lm_head" if t == "lm_head" else f"*.{t}"
        out.append(
            (
                policy_from_dict(
                    {"name": f"{t}@{fmt}", "default": "fp32", "layers": {pattern: fmt}},
                    f"<{t} alone in {fmt}>",
                ),
                "fp16",
            )
        )
    return out
