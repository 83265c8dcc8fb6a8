"""A Llama-family decoder (Llama, SmolLM2, Qwen2, Qwen3, Gemma 3) that runs on this CPU, in two
paths:

    ref = LlamaRef(weights)                       # plain NumPy FP32: the oracle
    llm = Llama(weights, policy="int4-g32", kv_dtype="fp16", max_context=2048)   # our kernels
    llm = Llama(compress(weights, policy), policy)   # a policy that prunes or calibrates
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

The weights arrive finished: a policy's `[prune]`, `[activations]` (W8A8) and GPTQ / AWQ steps
run before, in compress/ (`compress(weights, policy, calibration_tokens)`: narrower blocks,
AWQ-folded matrices, GPTQ-fitted tensors in `weights.stored`, static activation scales in
`weights.act_scales`), and `Llama` only puts each Linear in its format (runtime/linear.py): a
pruned block reads its own head counts and FFN width, an int8 Linear with a scale runs
`matmul_w8a8`. It refuses a policy with such steps on weights that did not go through
compress() for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np

from harmony_ref.kernels.activation import (
    gelu_tanh_gate_rows,
    gelu_tanh_gate_rows_par,
    silu_gate_rows,
    silu_gate_rows_par,
)
from harmony_ref.kernels.attention import (
    KVCache,
    decode_attention_unchecked,
    decode_step_attention,
    prefill_attention_unchecked,
    window_prefill_attention,
)
from harmony_ref.kernels.norm import (
    GELU_CUBIC,
    GELU_TANH_SCALE,
    PARALLEL_MIN_ROWS,
    add_rms_norm_rows,
    add_rms_norm_rows_par,
    rms_norm_heads_rows,
    rms_norm_heads_rows_par,
    rms_norm_rows,
    rms_norm_rows_par,
)
from harmony_ref.kernels.rope import rope_rows, rope_rows_par, rope_table
from harmony_ref.model.decoder import DecoderConfig, DecoderWeights, layer_name
from harmony_ref.quant.policy import Policy, load_policy
from harmony_ref.runtime.linear import Fused, QuantLinear, make_linear

DEFAULT_MAX_CONTEXT = 2048
_NO_NORM = np.zeros(0, dtype=np.float32)  # decode_step_attention's "no q / k head norm"


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


# A block's four Linear stages in the order they run, each (Linear short name, LayerWeights
# field) in row order: q|k|v and gate|up are one Fused each, o and down one QuantLinear
STAGE_PARTS = {
    "qkv": (("q_proj", "wq"), ("k_proj", "wk"), ("v_proj", "wv")),
    "o": (("o_proj", "wo"),),
    "gate_up": (("gate_proj", "w_gate"), ("up_proj", "w_up")),
    "down": (("down_proj", "w_down"),),
}
FUSED_STAGES = {"qkv": "self_attn.qkv_proj", "gate_up": "mlp.gate_up_proj"}


def stage_linear(i: int, stage: str, lw, policy: Policy, scales: dict, stored: dict):
    """Stage `stage` of block i from layer weights `lw` in `policy`'s formats: a Fused (q|k|v,
    gate|up) or a QuantLinear (o, down); `scales`: W8A8 activation scales, `stored`: tensors
    to use as they are (the file's, or GPTQ's), both by Linear name."""
    parts = [(layer_name(i, short), getattr(lw, attr)) for short, attr in STAGE_PARTS[stage]]
    if stage in FUSED_STAGES:
        return Fused(f"model.layers.{i}.{FUSED_STAGES[stage]}", parts, policy, scales, stored)
    ((name, w),) = parts
    return make_linear(name, w, policy.format_for(name), scales.get(name), stored.get(name))


def compresses(policy: Policy) -> bool:
    """Whether `policy` changes the weights before the decoder is built ([prune], [activations],
    GPTQ / AWQ in [quantize]): compress/ runs those steps, Llama takes their result."""
    return policy.prune is not None or policy.activations is not None or policy.calibrated


def _check_compressed(weights: DecoderWeights, policy: Policy) -> None:
    """ValueError unless `weights` went through compress/ for `policy` exactly when it compresses."""
    done = weights.compressed_for
    if done is not None and done != policy:
        raise ValueError(
            f"{policy.source}: the weights were compressed for policy {done.name!r}, "
            f"not {policy.name!r}: compress the checkpoint's weights for this policy"
        )
    if done is None and compresses(policy):
        raise ValueError(
            f"{policy.source}: policy {policy.name!r} prunes or calibrates: build the decoder "
            "on compress(weights, policy) (harmony_ref/compress/), or use build_model"
        )


def _rms_norm_for(t: int):
    """The RMSNorm row kernel for a call of t rows: prefill's parallel one from
    PARALLEL_MIN_ROWS rows, else decode's serial one (looked up by name at each call, so that
    calibrate/decoder_ops.py's timers see it)."""
    return rms_norm_rows_par if t >= PARALLEL_MIN_ROWS else rms_norm_rows


class Llama:
    """The decoder on our kernels under a quantization policy (see the module docstring)."""

    def __init__(
        self,
        weights: DecoderWeights,
        policy: str | Policy = "fp32",
        kv_dtype: str = "fp16",
        max_context: int = DEFAULT_MAX_CONTEXT,
    ):
        self.config = c = weights.config
        policy = load_policy(policy)
        _check_compressed(weights, policy)  # compress/ names the policy as it was given
        spec = c.to_spec()  # a mix (q4_k_m) resolved for this model's layers and rows
        self.policy = policy.bind(spec.weight_rows(), spec.n_layers)
        scales = weights.act_scales  # W8A8 static activation scales (compress/)
        stored = weights.stored  # as the file stores them, or as GPTQ fitted them
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
        self.gelu = c.activation == "gelu_tanh"
        self.blocks: list[Block] = []
        for i, lw in enumerate(weights.layers):
            bias = np.concatenate([lw.bq, lw.bk, lw.bv]) if c.attention_bias else None
            nh, nkv, ffn = lw.dims(c.head_dim)
            stage = partial(
                stage_linear, i, lw=lw, policy=self.policy, scales=scales, stored=stored
            )
            self.blocks.append(
                Block(
                    attn_norm=lw.attn_norm,
                    qkv=stage("qkv"),
                    qkv_bias=None if bias is None else bias.astype(np.float32),
                    o=stage("o"),
                    ffn_norm=lw.ffn_norm,
                    gate_up=stage("gate_up"),
                    down=stage("down"),
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
        h = _rms_norm_for(t)(x, self.blocks[0].attn_norm, self.eps, np.empty_like(x))
        n_blocks = len(self.blocks)
        for i, b in enumerate(self.blocks):
            nxt = self.blocks[i + 1].attn_norm if i + 1 < n_blocks else self.final_norm
            self._block(b, x, h, p0, nxt)
        self.pos = p0 + t
        return self.lm_head(h if all_logits else h[-1:])  # (T, V) or (1, V)

    def _block(self, b: Block, x: np.ndarray, h: np.ndarray, p0: int, nxt: np.ndarray) -> None:
        """One block at positions p0 .. p0 + T - 1: x (T, D) the residual stream, h its
        attn-normed rows; both updated in place (h = the next norm `nxt` of the new x). The row
        ops between the GEMMs run their `_par` kernels (rows split between threads) from
        PARALLEL_MIN_ROWS rows, their serial ones for a decode row."""
        c = self.config
        t, hd = x.shape[0], c.head_dim
        par = t >= PARALLEL_MIN_ROWS
        norm = _rms_norm_for(t)
        add_norm = add_rms_norm_rows_par if par else add_rms_norm_rows
        if self.gelu:
            act_rows = gelu_tanh_gate_rows_par if par else gelu_tanh_gate_rows
        else:
            act_rows = silu_gate_rows_par if par else silu_gate_rows
        qd = b.n_heads * hd
        qkv = b.qkv(h)  # (T, H hd + 2 Hkv hd)
        if b.qkv_bias is not None:
            qkv += b.qkv_bias
        if t == 1 and b.cache.dtype == "fp16":  # a decode step: norms to attention in one call
            a = self._decode_attention(b, qkv, p0)
        else:
            a = self._attention(b, qkv, p0, par)
        o = b.o(a.reshape(t, qd))  # (T, D)
        if b.post_attn_norm is not None:
            norm(o, b.post_attn_norm, self.eps, o)
        add_norm(x, o, b.ffn_norm, self.eps, h)  # x += o; h = rms_norm(x)
        gu = b.gate_up(h)  # (T, 2F)
        act = act_rows(gu, np.empty((t, b.ffn_dim), np.float32))  # (T, F)
        d = b.down(act)  # (T, D)
        if b.post_ffn_norm is not None:
            norm(d, b.post_ffn_norm, self.eps, d)
        add_norm(x, d, nxt, self.eps, h)  # x += d; h = next norm of x

    def _decode_attention(self, b: Block, qkv: np.ndarray, p0: int) -> np.ndarray:
        """A decode step's attention (H, hd) from its q|k|v row over an fp16 cache, its row stored
        in the slot the cache gives it (kernels/attention.py decode_step_attention)."""
        cos, sin = b.rope
        slot, length = b.cache.claim_slot()
        return decode_step_attention(
            qkv,
            b.n_heads,
            b.n_kv_heads,
            self.config.head_dim,
            _NO_NORM if b.q_norm is None else b.q_norm,
            _NO_NORM if b.k_norm is None else b.k_norm,
            self.eps,
            cos[p0 : p0 + 1],
            sin[p0 : p0 + 1],
            self.q_factor,
            b.cache.k.view(np.uint16),
            b.cache.v.view(np.uint16),
            slot,
            length,
        )

    def _attention(self, b: Block, qkv: np.ndarray, p0: int, par: bool) -> np.ndarray:
        """Attention (T, H, hd) of T rows of q|k|v (in place: q's and k's heads normalised and
        rotated, q scaled), their k and v stored in the cache: prefill's path, and a decode
        step's over an int8 cache."""
        t, hd = qkv.shape[0], self.config.head_dim
        nh, nkv = b.n_heads, b.n_kv_heads
        qd, kvd = nh * hd, nkv * hd
        rope = rope_rows_par if par else rope_rows
        if b.q_norm is not None:  # per head, in place: q's heads, then k's
            head_norm = rms_norm_heads_rows_par if par else rms_norm_heads_rows
            head_norm(qkv, 0, nh, hd, b.q_norm, self.eps)
            head_norm(qkv, nh, nkv, hd, b.k_norm, self.eps)
        cos, sin = b.rope
        rope(qkv, nh + nkv, hd, cos[p0 : p0 + t], sin[p0 : p0 + t])  # q and k heads, in place
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
        return a

    def run_block(self, i: int, x: np.ndarray) -> np.ndarray:
        """Block i alone on one window's residual stream x (T, D) from position 0, its KV cache
        emptied first: the new residual stream (calibration runs the model block by block)."""
        b = self.blocks[i]
        b.cache.reset()
        x = np.array(x, dtype=np.float32)
        h = _rms_norm_for(x.shape[0])(x, b.attn_norm, self.eps, np.empty_like(x))
        self._block(b, x, h, 0, b.attn_norm)
        b.cache.reset()
        return x

    def prefill(self, tokens, all_logits: bool = False) -> np.ndarray:
        tokens = np.asarray(tokens, dtype=np.int64)
        logits = self.forward(tokens, all_logits)
        return logits if all_logits else logits[-1]

    def decode(self, token: int) -> np.ndarray:
        return self.forward(np.array([token], dtype=np.int64))[0]


__all__ = ["DecoderConfig", "DecoderWeights", "Llama", "LlamaRef", "compresses", "make_linear"]
