"""A Llama-family decoder (Llama, SmolLM2, Qwen2, Qwen3, Gemma 3) that runs on this CPU, in two
paths:

    ref = LlamaRef(weights)                       # plain NumPy FP32: the oracle
    llm = Llama(weights, policy="int4-g32", kv_dtype="fp16", max_context=2048)   # our kernels
    logits = llm.prefill(token_ids)               # (V,) for the last token (all_logits: (T, V))
    logits = llm.decode(next_id)                  # (V,): one token, reading the KV cache

Both follow the same math, in this order (llama2.c's run.c, shapes in the comments; D = dim,
H / Hkv = query / kv heads, hd = head dim, F = ffn dim, V = vocab, T = tokens in this call;
[brackets]: only where the config says so, model/decoder.py):

    x = embed[tokens] [* embed_scale]                          (T, D)   Gemma: sqrt(D)
    for each layer:
        h = rms_norm(x) * attn_norm                            (T, D)
        q, k, v = h @ Wq.T [+bq], h @ Wk.T [+bk], h @ Wv.T [+bv]  (T, H hd), (T, Hkv hd) x 2
        [q, k = rms_norm(q) * q_norm, rms_norm(k) * k_norm     per head: Qwen3, Gemma 3]
        q, k = rope(q), rope(k)          rotate-half, angle pos * theta_layer^(-2j / hd)
        cache.append(k, v)                                     (L, Hkv, hd), L = pos + T
        a = softmax(q k^T * scale, causal [, last W keys]) v   query head h reads kv head
                                                               h // (H / Hkv); local layers: W
        o = a @ Wo.T [; o = rms_norm(o) * post_attn_norm]      (T, D)
        x = x + o
        h = rms_norm(x) * ffn_norm
        f = (act(h @ Wgate.T) * (h @ Wup.T)) @ Wdown.T [; rms_norm(f) * post_ffn_norm]
        x = x + f                                              act: silu or gelu_tanh (Gemma)
    logits = rms_norm(x) * final_norm @ head.T                 (T, V); head = embed when tied

Gemma 3's local layers (five of every six) attend to the last `sliding_window` positions and
rotate with their own RoPE base; their KV cache keeps only that window (kernels.KVCache's ring),
so its memory does not grow with the context.

The kernel path (`Llama`) runs each Linear in its policy's format (quant/policy.py: fp32 BLAS,
fp16 weights as stored, int8 via `matmul_w8`, int4-gNN via `matmul_w4`, both with int8
activations) and fuses where the math allows: q|k|v and gate|up become one matmul each when the
policy gives them one format (per-row quantization makes the concatenation exact), RoPE rotates
q and k in place in the fused row, the residual add is fused into the next RMSNorm, SiLU-gate
reads the fused gate|up. Shapes are validated once at load (model/decoder.py); the per-token
path has no checks and allocates only the kernels' outputs. The KV cache is kernels.KVCache,
fp16 or int8. The embedding table stays FP32 for the lookup; the output head (tied or not) is
the Linear `lm_head` and takes the policy's format for that name.

A policy's `[prune]` table (model/prune.py) removes FFN channels and heads before quantizing, so
the blocks are narrower matrices (each block reads its own head counts and FFN width; with
`score = "activation"` the unpruned model first runs in FP32 on the calibration windows to score
them, runtime/calibration.py: activation_norms; with `repair` it records the inputs' Gram
matrices instead, `unpruned_grams`, which also choose the channels of `score = "obs"`); its
`[activations]` table (W8A8) runs every int8 Linear on `matmul_w8a8` with static activation
scales calibrated on the policy's samples by this same model in FP32 (runtime/calibration.py).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import partial

import numpy as np

from harmony_ref.kernels.activation import gelu_tanh_gate_rows, silu_gate_rows
from harmony_ref.kernels.attention import (
    KVCache,
    decode_attention_unchecked,
    prefill_attention_unchecked,
    window_prefill_attention,
)
from harmony_ref.kernels.matmul_ggml import Q4_TYPES, prepare_q4_rows
from harmony_ref.kernels.matmul_w8a8 import matmul_w8a8, quantize_w8a8
from harmony_ref.kernels.norm import (
    GELU_CUBIC,
    GELU_TANH_SCALE,
    add_rms_norm_rows,
    rms_norm_heads_rows,
    rms_norm_rows,
)
from harmony_ref.kernels.rope import rope_rows, rope_table
from harmony_ref.model.decoder import DecoderConfig, DecoderWeights, layer_name
from harmony_ref.model.distill import distill_decoder
from harmony_ref.model.prune import prune_decoder
from harmony_ref.quant.ggml import QUANTIZERS as GGML_QUANTIZERS
from harmony_ref.quant.ggml import GGMLTensor
from harmony_ref.quant.ggml import concat_rows as concat_ggml_rows
from harmony_ref.quant.int4 import Int4Tensor, quantize_int4
from harmony_ref.quant.int8 import Int8Tensor, quantize_int8
from harmony_ref.quant.kquants import (
    KQUANT_TYPES,
    KQuantTensor,
    quantize_kquant_ref,
)
from harmony_ref.quant.policy import (
    FP32,
    Policy,
    WeightFormat,
    int4_format_for_rows,
    load_policy,
    parse_format,
)
from harmony_ref.runtime.calibration import (
    GENERATED_POLICY,
    activation_norms,
    calibration_windows,
    observe_scales,
)
from harmony_ref.runtime.linear import QuantLinear
from harmony_ref.runtime.progress import report
from harmony_ref.runtime.sequential import activation_grams, calibrate_weights

DEFAULT_MAX_CONTEXT = 2048
F16_CHUNK_ROWS = 4096  # fp16 Linears widen this many weight rows at a time (bounded scratch)


# ----------------------------------------------------------------------------------------------
# The FP32 reference (oracle): NumPy only, float32 KV cache, no kernels.


class LlamaRef:
    """Plain NumPy FP32 forward over the checkpoint's weights as read (dequantized exactly)."""

    def __init__(self, weights: DecoderWeights, max_context: int = DEFAULT_MAX_CONTEXT):
        self.w = weights
        self.config = c = weights.config
        self.max_context = min(max_context, c.max_positions)
        self.rope = {
            theta: rope_table(self.max_context, c.head_dim, theta)  # cos, sin
            for theta in {c.layer_rope_theta(i) for i in range(c.n_layers)}
        }
        shape = (c.n_layers, self.max_context, c.n_kv_heads, c.head_dim)
        self.k_cache = np.zeros(shape, np.float32)  # (layers, L, Hkv, hd): every position kept
        self.v_cache = np.zeros(shape, np.float32)
        self.pos = 0
        self.name = "fp32-reference"

    def reset(self) -> None:
        self.pos = 0

    def _rms_norm(self, x, weight):
        return (
            x
            / np.sqrt((x * x).mean(axis=-1, keepdims=True) + np.float32(self.config.norm_eps))
            * weight
        )

    def _rope(self, x, p0, theta):  # x (T, heads, hd)
        t, _, hd = x.shape
        cos, sin = self.rope[theta]
        c, s = cos[p0 : p0 + t, None, :], sin[p0 : p0 + t, None, :]  # (T, 1, hd/2)
        x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
        return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)

    def forward(self, tokens, all_logits: bool = True) -> np.ndarray:
        c, w = self.config, self.w
        tokens = np.asarray(tokens, dtype=np.int64)
        t, p0 = tokens.shape[0], self.pos
        if p0 + t > self.max_context:
            raise ValueError(f"context full: {p0} + {t} tokens > max_context {self.max_context}")
        length = p0 + t
        # causal mask: query i (absolute p0 + i) sees keys 0 .. p0 + i; a local layer only the
        # last sliding_window of them
        key_pos, query_pos = np.arange(length)[None, :], (p0 + np.arange(t))[:, None]
        causal = key_pos <= query_pos  # (T, L)
        local = causal & (key_pos > query_pos - c.sliding_window)
        x = w.embed[tokens] * np.float32(c.embed_scale)  # (T, D)
        for i, lw in enumerate(w.layers):
            nh, nkv, _ = lw.dims(c.head_dim)  # a pruned block is narrower than the config
            group = nh // nkv
            h = self._rms_norm(x, lw.attn_norm)
            q, k, v = h @ lw.wq.T, h @ lw.wk.T, h @ lw.wv.T
            if c.attention_bias:
                q, k, v = q + lw.bq, k + lw.bk, v + lw.bv
            q, k = q.reshape(t, nh, c.head_dim), k.reshape(t, nkv, c.head_dim)
            if c.qk_norm:
                q, k = self._rms_norm(q, lw.q_norm), self._rms_norm(k, lw.k_norm)
            theta = c.layer_rope_theta(i)
            q = self._rope(q, p0, theta)  # (T, H, hd)
            k = self._rope(k, p0, theta)  # (T, Hkv, hd)
            self.k_cache[i, p0:length, :nkv] = k
            self.v_cache[i, p0:length, :nkv] = v.reshape(t, nkv, c.head_dim)
            keys = np.repeat(self.k_cache[i, :length, :nkv], group, axis=1)  # (L, H, hd)
            vals = np.repeat(self.v_cache[i, :length, :nkv], group, axis=1)
            scores = q.transpose(1, 0, 2) @ keys.transpose(1, 2, 0)  # (H, T, L)
            mask = local if c.is_local(i) else causal
            scores = np.where(mask, scores * np.float32(c.query_scale), -np.inf)
            p = np.exp(scores - scores.max(axis=2, keepdims=True))
            p /= p.sum(axis=2, keepdims=True)
            a = (p @ vals.transpose(1, 0, 2)).transpose(1, 0, 2).reshape(t, nh * c.head_dim)
            o = a @ lw.wo.T
            if c.post_norms:
                o = self._rms_norm(o, lw.post_attn_norm)
            x = x + o
            h = self._rms_norm(x, lw.ffn_norm)
            g, u = h @ lw.w_gate.T, h @ lw.w_up.T  # (T, F)
            if c.activation == "gelu_tanh":
                act = (
                    np.float32(0.5)
                    * g
                    * (
                        1
                        + np.tanh(
                            np.float32(GELU_TANH_SCALE) * (g + np.float32(GELU_CUBIC) * g * g * g)
                        )
                    )
                )
            else:
                act = g / (1 + np.exp(-g))
            f = (act * u) @ lw.w_down.T
            if c.post_norms:
                f = self._rms_norm(f, lw.post_ffn_norm)
            x = x + f
        self.pos = length
        x = x if all_logits else x[-1:]
        logits = self._rms_norm(x, w.final_norm) @ w.head.T  # (T, V)
        return logits.astype(np.float32)

    def prefill(self, tokens, all_logits: bool = False) -> np.ndarray:
        logits = self.forward(tokens, all_logits)
        return logits if all_logits else logits[-1]

    def decode(self, token: int) -> np.ndarray:
        return self.forward([token], all_logits=False)[0]


# ----------------------------------------------------------------------------------------------
# The kernel path


def _matmul_f16(x, w16):
    """x (M, K) float32 @ W.T for float16 W (N, K), widened F16_CHUNK_ROWS rows at a time."""
    n = w16.shape[0]
    out = np.empty((x.shape[0], n), dtype=np.float32)
    for n0 in range(0, n, F16_CHUNK_ROWS):
        out[:, n0 : n0 + F16_CHUNK_ROWS] = x @ w16[n0 : n0 + F16_CHUNK_ROWS].astype(np.float32).T
    return out


def _prepared(name: str, fmt: WeightFormat, stored, matmul=None, operand=None) -> QuantLinear:
    """A QuantLinear with its kernel operand built now (at load, not inside a timed step)."""
    lin = QuantLinear(name, fmt, stored, matmul=matmul, operand=operand)
    lin.prepare()
    return lin


def _stored_in(stored, fmt: WeightFormat):
    """`stored` (a matrix as the checkpoint file holds it) when it is in `fmt`, else None."""
    if isinstance(stored, (GGMLTensor, KQuantTensor)):
        return stored if stored.qtype == fmt.kind else None
    if isinstance(stored, np.ndarray) and fmt.kind in ("fp32", "fp16"):
        return (
            stored if stored.dtype == (np.float16 if fmt.kind == "fp16" else np.float32) else None
        )
    return None


def make_linear(
    name: str, w: np.ndarray, fmt: WeightFormat, act_scale=None, stored=None
) -> QuantLinear:
    """Quantize (or cast) an FP32 (N, K) weight into `fmt` and prepare its kernel layout; an
    int8 weight with a static activation scale (K,) runs W8A8 (kernels/matmul_w8a8.py).
    `stored`: the weight already in a stored form. An int4 / int8 tensor fitted on calibration
    data (GPTQ) is used instead of quantizing `w`; the weight as the checkpoint file stores it
    (DecoderWeights.stored) is used as it is when it is already in `fmt`, never requantized (the
    `as-stored` policy)."""
    n, k = w.shape
    if isinstance(stored, (Int4Tensor, Int8Tensor)):
        if act_scale is not None:
            raise ValueError(f"{name}: a GPTQ-fitted weight cannot also run W8A8")
        if fmt.kind == "int8":
            return _prepared(name, fmt, stored)
        fmt = int4_format_for_rows(fmt, k)
        return _prepared(name, fmt, stored)
    as_stored = _stored_in(stored, fmt) if act_scale is None else None
    if fmt.ggml:
        t = as_stored if as_stored is not None else GGML_QUANTIZERS[fmt.kind](w)
        return _prepared(name, fmt, t)
    if fmt.kind in KQUANT_TYPES:
        t = as_stored if as_stored is not None else quantize_kquant_ref(w, fmt.kind)
        return _prepared(name, fmt, t)
    if as_stored is not None:
        w = as_stored
    if fmt.kind == "int8" and act_scale is not None:
        t = quantize_w8a8(w, act_scale)
        return _prepared(name, fmt, t, matmul_w8a8, t)
    if fmt.kind == "fp32":
        w = np.ascontiguousarray(w, dtype=np.float32)
        return _prepared(name, fmt, w)
    if fmt.kind == "fp16":
        w16 = w.astype(np.float16)
        return _prepared(name, fmt, w16, _matmul_f16, w16)
    if fmt.kind == "int8":
        t = quantize_int8(w)
        return _prepared(name, fmt, t)
    fmt = int4_format_for_rows(fmt, k)
    t = quantize_int4(w, group_size=fmt.group_size, scheme=fmt.scheme)
    return _prepared(name, fmt, t)


def quantize_stored(w: np.ndarray, fmt: WeightFormat):
    """Round-to-nearest storage of an FP32 (N, K) weight in int4 / int8 (as make_linear)."""
    if fmt.kind == "int8":
        return quantize_int8(w)
    fmt = int4_format_for_rows(fmt, w.shape[1])
    return quantize_int4(w, group_size=fmt.group_size, scheme=fmt.scheme)


def concat_rows(tensors):
    """Stored int4 / int8 tensors of one format and row length, rows concatenated (exact:
    every scale is per row or per group within a row)."""
    if len(tensors) == 1:
        return tensors[0]
    t0 = tensors[0]
    n = sum(t.shape[0] for t in tensors)
    if isinstance(t0, Int8Tensor):
        return Int8Tensor(
            np.concatenate([t.values for t in tensors]),
            np.concatenate([t.scale for t in tensors]),
            (n, t0.shape[1]),
        )
    zp = None if t0.zero_point is None else np.concatenate([t.zero_point for t in tensors])
    return Int4Tensor(
        np.concatenate([t.packed for t in tensors]),
        np.concatenate([t.scale for t in tensors]),
        zp,
        (n, t0.shape[1]),
        t0.group_size,
        t0.scheme,
    )


class Fused:
    """Several Linears over one input, outputs concatenated along N: one matmul when they share
    a format (weights concatenated row-wise before quantizing), else one call each."""

    def __init__(
        self,
        name: str,
        parts: list[tuple[str, np.ndarray]],
        policy: Policy,
        act_scales: dict | None = None,
        stored: dict | None = None,
    ):
        fmts = [policy.format_for(n) for n, _ in parts]
        scales = [(act_scales or {}).get(n) for n, _ in parts]  # one input: the same scale
        given = [(stored or {}).get(n) for n, _ in parts]
        fitted = [t if isinstance(t, (Int4Tensor, Int8Tensor)) else None for t in given]
        if all(f == fmts[0] for f in fmts) and any(t is not None for t in fitted):
            # some parts fitted (GPTQ), the rest rounded: rows of one stored tensor
            ts = [
                t if t is not None else quantize_stored(a, f)
                for (_, a), f, t in zip(parts, fmts, fitted)
            ]
            w = np.concatenate([a for _, a in parts], axis=0)
            self.linears = [make_linear(name, w, fmts[0], scales[0], concat_rows(ts))]
        elif all(f == fmts[0] for f in fmts):
            w = np.concatenate([a for _, a in parts], axis=0)
            kept = [_stored_in(t, fmts[0]) for t in given]
            fused = None
            if all(t is not None for t in kept):  # rows concatenate exactly, as stored
                fused = (
                    concat_ggml_rows(kept)  # GGUF blocks: GGMLTensor or KQuantTensor
                    if isinstance(kept[0], (GGMLTensor, KQuantTensor))
                    else np.concatenate(kept, axis=0)
                )
            self.linears = [make_linear(name, w, fmts[0], scales[0], fused)]
        elif (
            len(parts) > 1
            and all(f.kind in Q4_TYPES for f in fmts)
            and all(s is None for s in scales)
            and not any(t is not None for t in fitted)
        ):
            # Q4_0 and Q4_1 parts (a mixed GGUF plan): one matmul, rows concatenated
            ts = [_stored_in(t, f) if t is not None else None for t, f in zip(given, fmts)]
            ts = [
                t if t is not None else GGML_QUANTIZERS[f.kind](a)
                for t, f, (_, a) in zip(ts, fmts, parts)
            ]
            p = prepare_q4_rows(ts)
            self.linears = [QuantLinear(name, parse_format("q4_1"), p, operand=p)]
        else:
            self.linears = [
                make_linear(n, a, f, s, t) for (n, a), f, s, t in zip(parts, fmts, scales, given)
            ]
        self.formats = {n: f.name for (n, _), f in zip(parts, fmts)}
        self.single = self.linears[0] if len(self.linears) == 1 else None

    def __call__(self, x):
        if self.single is not None:
            return self.single(x)
        return np.concatenate([lin(x) for lin in self.linears], axis=1)

    @property
    def nbytes(self) -> int:
        return sum(lin.nbytes for lin in self.linears)


@dataclass
class Block:
    attn_norm: np.ndarray  # (D,)
    qkv: Fused  # (T, D) -> (T, H hd + 2 Hkv hd)
    qkv_bias: np.ndarray | None  # (H hd + 2 Hkv hd,)
    o: QuantLinear  # (T, H hd) -> (T, D)
    ffn_norm: np.ndarray
    gate_up: Fused  # (T, D) -> (T, 2F)
    down: QuantLinear  # (T, F) -> (T, D)
    cache: KVCache  # a ring of the last `window` tokens on a local layer
    n_heads: int  # H, Hkv and F of this block (narrower than the config's when pruned)
    n_kv_heads: int
    ffn_dim: int
    rope: tuple  # (cos, sin) tables (max_context, hd / 2) of this layer's RoPE base
    window: int = 0  # sliding window of a local layer (0: global)
    q_norm: np.ndarray | None = None  # (hd,) qk_norm only
    k_norm: np.ndarray | None = None
    post_attn_norm: np.ndarray | None = None  # (D,) post_norms only
    post_ffn_norm: np.ndarray | None = None


_GRAMS: dict = {}  # (id(weights), windows' SHA-256) -> (weights, grams): the last one computed


def unpruned_grams(weights: DecoderWeights, windows: np.ndarray) -> list:
    """runtime/sequential.py activation_grams of `weights` run in FP32 on `windows`, kept for the
    last (weights, windows) pair of the process: the policies of one run that repair on the same
    windows (ridges, ratios, scores) share one pass (the Grams of SmolLM2 on 512 windows of 128
    tokens take minutes; they hold ~0.6 GB)."""
    windows = np.ascontiguousarray(windows, np.int64)
    key = (id(weights), hashlib.sha256(windows.tobytes()).hexdigest())
    hit = _GRAMS.get(key)
    if hit is not None and hit[0] is weights:
        return hit[1]
    base = Llama(weights, Policy("fp32", FP32), max_context=windows.shape[1])
    grams = activation_grams(base, windows)
    _GRAMS.clear()
    _GRAMS[key] = (weights, grams)
    return grams


class Llama:
    """The decoder on our kernels under a quantization policy (see the module docstring)."""

    def __init__(
        self,
        weights: DecoderWeights,
        policy: str | Policy = "fp32",
        kv_dtype: str = "fp16",
        max_context: int = DEFAULT_MAX_CONTEXT,
        calibration_tokens=None,
    ):
        self.config = c = weights.config
        self.policy = load_policy(policy)
        prune = self.policy.prune

        def sampler(weights: DecoderWeights, max_context: int) -> Llama:  # "generated" windows
            return Llama(weights, GENERATED_POLICY, max_context=max_context)

        if prune is not None:
            norms = None
            grams = None
            windows = (  # the one set every calibrated step below reads
                calibration_windows(weights, prune.windows(), calibration_tokens, sampler)
                if prune.calibrates
                else None
            )
            if prune.repair:  # Gram matrices (and norms) of the unpruned model in FP32
                grams = unpruned_grams(weights, windows)
                norms = [
                    (np.sqrt(np.diag(gf)), np.sqrt(np.diag(go).reshape(-1, c.head_dim).sum(axis=1)))
                    for gf, go in grams
                ]
            elif prune.score == "activation":  # scored by the unpruned model run in FP32
                base = Llama(weights, Policy("fp32", FP32), max_context=prune.sample_tokens)
                norms = activation_norms(base, windows, c.head_dim)
                del base
            pruned = prune_decoder(weights, prune, norms, grams)
            if prune.distill_epochs:  # fine-tuned on the unpruned model's outputs
                pruned, _ = distill_decoder(
                    weights,
                    pruned,
                    windows,
                    prune.distill_epochs,
                    prune.distill_lr,
                    prune.distill_params,
                    prune.seed,
                    partial(report, "distilling the pruned model (windows x epochs)"),
                )
            weights = pruned
        act = self.policy.activations
        scales = {}
        if act is not None:  # static scales from this (pruned) model run in FP32
            base = Llama(weights, Policy("fp32", FP32), max_context=act.sample_tokens)
            windows = calibration_windows(weights, act, calibration_tokens, sampler)
            scales = observe_scales(base, windows, act.granularity, act.alpha)
        # weights as the file stores them: used where the policy asks for that very format
        # (pruning changes the matrices, so a pruned model requantizes)
        stored = weights.stored if prune is None else {}
        if self.policy.calibrated:  # GPTQ / AWQ on this (pruned) model's calibration windows
            q = self.policy.quantize
            windows = calibration_windows(weights, q.activations(), calibration_tokens, sampler)
            if scales and "awq" in {q.method, *(m for _, m in q.methods)}:
                raise ValueError(
                    f"{self.policy.source}: [quantize] awq with [activations]: the "
                    "static activation scales would no longer fit the folded model"
                )
            base = Llama(weights, Policy("fp32", FP32), max_context=q.sample_tokens)
            # the fitted tensors replace the file's (AWQ rescales the weights it folds into)
            weights, stored = calibrate_weights(base, weights, self.policy, windows)
            del base
        self.kv_dtype = kv_dtype
        self.max_context = min(max_context, c.max_positions)
        self.eps = np.float32(c.norm_eps)
        tables = {
            theta: rope_table(self.max_context, c.head_dim, theta)
            for theta in {c.layer_rope_theta(i) for i in range(c.n_layers)}
        }
        self.embed = weights.embed  # (V, D) FP32 lookup table
        self.embed_scale = np.float32(c.embed_scale)
        # the kernels scale scores by 1 / sqrt(hd); another scale is folded into q
        self.q_factor = np.float32(c.query_scale * math.sqrt(c.head_dim))
        self.act = gelu_tanh_gate_rows if c.activation == "gelu_tanh" else silu_gate_rows
        self.blocks: list[Block] = []
        for i, lw in enumerate(weights.layers):
            n = lambda short, i=i: layer_name(i, short)  # noqa: E731
            bias = np.concatenate([lw.bq, lw.bk, lw.bv]) if c.attention_bias else None
            nh, nkv, ffn = lw.dims(c.head_dim)
            self.blocks.append(
                Block(
                    attn_norm=lw.attn_norm,
                    qkv=Fused(
                        f"model.layers.{i}.self_attn.qkv_proj",
                        [(n("q_proj"), lw.wq), (n("k_proj"), lw.wk), (n("v_proj"), lw.wv)],
                        self.policy,
                        scales,
                        stored,
                    ),
                    qkv_bias=None if bias is None else bias.astype(np.float32),
                    o=make_linear(
                        n("o_proj"),
                        lw.wo,
                        self.policy.format_for(n("o_proj")),
                        scales.get(n("o_proj")),
                        stored.get(n("o_proj")),
                    ),
                    ffn_norm=lw.ffn_norm,
                    gate_up=Fused(
                        f"model.layers.{i}.mlp.gate_up_proj",
                        [(n("gate_proj"), lw.w_gate), (n("up_proj"), lw.w_up)],
                        self.policy,
                        scales,
                        stored,
                    ),
                    down=make_linear(
                        n("down_proj"),
                        lw.w_down,
                        self.policy.format_for(n("down_proj")),
                        scales.get(n("down_proj")),
                        stored.get(n("down_proj")),
                    ),
                    cache=KVCache(
                        self.max_context,
                        nkv,
                        c.head_dim,
                        kv_dtype,
                        window=c.sliding_window if c.is_local(i) else 0,
                    ),
                    n_heads=nh,
                    n_kv_heads=nkv,
                    ffn_dim=ffn,
                    rope=tables[c.layer_rope_theta(i)],
                    window=c.sliding_window if c.is_local(i) else 0,
                    q_norm=lw.q_norm,
                    k_norm=lw.k_norm,
                    post_attn_norm=lw.post_attn_norm,
                    post_ffn_norm=lw.post_ffn_norm,
                )
            )
        self.final_norm = weights.final_norm
        self.lm_head = make_linear(
            "lm_head",
            weights.head,
            self.policy.format_for("lm_head"),
            scales.get("lm_head"),
            stored.get("lm_head"),
        )
        self.pos = 0
        self.name = f"{self.policy.name}" + ("" if kv_dtype == "fp16" else f"+kv-{kv_dtype}")

    # -- bookkeeping ---------------------------------------------------------------------------

    def reset(self) -> None:
        self.pos = 0
        for b in self.blocks:
            b.cache.reset()

    def formats(self) -> dict[str, str]:
        """Layer name -> stored format, for every Linear."""
        out = {}
        for b in self.blocks:
            out.update(b.qkv.formats)
            out[b.o.name] = b.o.fmt.name
            out.update(b.gate_up.formats)
            out[b.down.name] = b.down.fmt.name
        out["lm_head"] = self.lm_head.fmt.name
        return out

    def weight_bytes(self) -> dict[str, int]:
        linear = (
            sum(b.qkv.nbytes + b.o.nbytes + b.gate_up.nbytes + b.down.nbytes for b in self.blocks)
            + self.lm_head.nbytes
        )
        norms = sum(
            a.nbytes
            for b in self.blocks
            for a in (
                b.attn_norm,
                b.ffn_norm,
                b.q_norm,
                b.k_norm,
                b.post_attn_norm,
                b.post_ffn_norm,
            )
            if a is not None
        )
        return {
            "linear": linear,
            "embedding": self.embed.nbytes,
            "norms": norms + self.final_norm.nbytes,
        }

    def kv_cache_bytes(self) -> int:
        return sum(b.cache.nbytes for b in self.blocks)

    # -- forward ---------------------------------------------------------------------------------

    def forward(self, tokens, all_logits: bool = False) -> np.ndarray:
        """Logits (T, V) for tokens (T,) ids at positions pos .. pos + T - 1, or (1, V) for the
        last one. T = 1 is the decode step; T > 1 is a causal prefill."""
        t, p0 = len(tokens), self.pos
        if p0 + t > self.max_context:
            raise ValueError(f"context full: {p0} + {t} tokens > max_context {self.max_context}")
        x = self.embed[tokens]  # (T, D) fresh copy: the residual stream
        if self.embed_scale != 1:
            x *= self.embed_scale
        h = rms_norm_rows(x, self.blocks[0].attn_norm, self.eps, np.empty_like(x))
        n_blocks = len(self.blocks)
        for i, b in enumerate(self.blocks):
            nxt = self.blocks[i + 1].attn_norm if i + 1 < n_blocks else self.final_norm
            self._block(b, x, h, p0, nxt)
        self.pos = p0 + t
        return self.lm_head(h if all_logits else h[-1:])  # (T, V) or (1, V)

    def _block(self, b: Block, x: np.ndarray, h: np.ndarray, p0: int, nxt: np.ndarray) -> None:
        """One block at positions p0 .. p0 + T - 1: x (T, D) the residual stream, h its
        attn-normed rows; both updated in place (h = the next norm `nxt` of the new x)."""
        c = self.config
        t, hd = x.shape[0], c.head_dim
        nh, nkv = b.n_heads, b.n_kv_heads
        qd, kvd = nh * hd, nkv * hd
        qkv = b.qkv(h)  # (T, H hd + 2 Hkv hd)
        if b.qkv_bias is not None:
            qkv += b.qkv_bias
        if b.q_norm is not None:  # per head, in place: q's heads, then k's
            rms_norm_heads_rows(qkv, 0, nh, hd, b.q_norm, self.eps)
            rms_norm_heads_rows(qkv, nh, nkv, hd, b.k_norm, self.eps)
        cos, sin = b.rope
        rope_rows(qkv, nh + nkv, hd, cos[p0 : p0 + t], sin[p0 : p0 + t])  # q and k heads, in place
        if self.q_factor != 1:
            qkv[:, :qd] *= self.q_factor
        k_new = qkv[:, qd : qd + kvd].reshape(t, nkv, hd)
        v_new = qkv[:, qd + kvd :].reshape(t, nkv, hd)
        if t == 1:
            b.cache.store(k_new, v_new)
            a = decode_attention_unchecked(qkv[0, :qd].reshape(nh, hd), b.cache)
        elif b.window:  # the ring's past window, then this call's keys as the cache keeps them
            past_k, past_v = b.cache.ordered_kv()
            new_k, new_v = b.cache.roundtrip(k_new, v_new)
            b.cache.store(k_new, v_new)
            q = np.ascontiguousarray(qkv[:, :qd]).reshape(t, nh, hd)
            a = window_prefill_attention(
                q, np.concatenate([past_k, new_k]), np.concatenate([past_v, new_v]), b.window
            )
        else:
            b.cache.store(k_new, v_new)
            q = np.ascontiguousarray(qkv[:, :qd]).reshape(t, nh, hd)
            a = prefill_attention_unchecked(q, b.cache)  # (T, H, hd)
        o = b.o(a.reshape(t, qd))  # (T, D)
        if b.post_attn_norm is not None:
            rms_norm_rows(o, b.post_attn_norm, self.eps, o)
        add_rms_norm_rows(x, o, b.ffn_norm, self.eps, h)  # x += o; h = rms_norm(x)
        gu = b.gate_up(h)  # (T, 2F)
        act = self.act(gu, np.empty((t, b.ffn_dim), np.float32))  # (T, F)
        d = b.down(act)  # (T, D)
        if b.post_ffn_norm is not None:
            rms_norm_rows(d, b.post_ffn_norm, self.eps, d)
        add_rms_norm_rows(x, d, nxt, self.eps, h)  # x += d; h = next norm of x

    def set_stage(
        self, i: int, stage: str, lw, policy: Policy, stored: dict, act_scales: dict | None = None
    ) -> None:
        """Rebuild stage `stage` (qkv, o, gate_up, down) of block i from layer weights `lw` in
        `policy`'s formats, GPTQ-fitted tensors from `stored`; the norms and the q|k|v bias
        follow `lw` (AWQ folds its scales into them)."""
        c, b = self.config, self.blocks[i]
        n = lambda short: layer_name(i, short)  # noqa: E731
        scales = act_scales or {}
        if stage == "qkv":
            b.attn_norm = lw.attn_norm
            b.qkv = Fused(
                f"model.layers.{i}.self_attn.qkv_proj",
                [(n("q_proj"), lw.wq), (n("k_proj"), lw.wk), (n("v_proj"), lw.wv)],
                policy,
                scales,
                stored,
            )
            if c.attention_bias:
                b.qkv_bias = np.concatenate([lw.bq, lw.bk, lw.bv]).astype(np.float32)
        elif stage == "o":
            b.o = make_linear(
                n("o_proj"),
                lw.wo,
                policy.format_for(n("o_proj")),
                scales.get(n("o_proj")),
                stored.get(n("o_proj")),
            )
        elif stage == "gate_up":
            b.ffn_norm = lw.ffn_norm
            b.gate_up = Fused(
                f"model.layers.{i}.mlp.gate_up_proj",
                [(n("gate_proj"), lw.w_gate), (n("up_proj"), lw.w_up)],
                policy,
                scales,
                stored,
            )
        elif stage == "down":
            b.down = make_linear(
                n("down_proj"),
                lw.w_down,
                policy.format_for(n("down_proj")),
                scales.get(n("down_proj")),
                stored.get(n("down_proj")),
            )
        else:
            raise ValueError(f"unknown stage {stage!r}")

    def run_block(self, i: int, x: np.ndarray) -> np.ndarray:
        """Block i alone on one window's residual stream x (T, D) from position 0, its KV cache
        emptied first: the new residual stream (calibration runs the model block by block)."""
        b = self.blocks[i]
        b.cache.reset()
        x = np.array(x, dtype=np.float32)
        h = rms_norm_rows(x, b.attn_norm, self.eps, np.empty_like(x))
        self._block(b, x, h, 0, b.attn_norm)
        b.cache.reset()
        return x

    def prefill(self, tokens, all_logits: bool = False) -> np.ndarray:
        tokens = np.asarray(tokens, dtype=np.int64)
        logits = self.forward(tokens, all_logits)
        return logits if all_logits else logits[-1]

    def decode(self, token: int) -> np.ndarray:
        return self.forward(np.array([token], dtype=np.int64))[0]


def build_model(
    weights: DecoderWeights,
    policy: str = "fp32",
    kv_dtype: str = "fp16",
    max_context: int = DEFAULT_MAX_CONTEXT,
    reference: bool = False,
):
    """The oracle (`reference=True`, or policy "reference") or the kernel path."""
    if reference or policy == "reference":
        return LlamaRef(weights, max_context)
    return Llama(weights, policy, kv_dtype, max_context)


__all__ = ["DecoderConfig", "DecoderWeights", "Llama", "LlamaRef", "build_model", "make_linear"]
