"""Turn the ops of a model graph (harmony_ref.model.graph) into host calls with real inputs.

`build_op(op, prims, ctx, graph)` returns a zero-argument callable that executes graph op `op` on
this CPU: `prims` are the primitive (unfused) ops it stands for (itself plus the epilogues the
fusion pass merged into it), each carrying its own shape (`Op.m, n, k`). Weights are random,
quantized to the layer's real format; activations are random of the right shape. Only the time
matters here, not the values.

Which code runs what:
- matmul: the layer format's kernel from kernels/formats.py: `matmul_w4` / `matmul_w8` (Numba)
  for INT4 / INT8 layers; FP16/FP32 layers run as a float32 NumPy matmul (this CPU has no fast
  fp16 path).
- LayerNorm, bias, GELU (encoders): the Numba kernels `layer_norm`, `bias_add`, `gelu`, and the
  fused `norm_bias_gelu` where the graph fused a norm with its activation. RMSNorm, SiLU, rope,
  gate multiply, residual adds, softmax, the embedding gather and pooling: NumPy, one call per
  primitive op, so an unfused graph pays one call per op and a fused one only where a fused host
  kernel exists.
- decode attention (QK^T, softmax, P.V over the KV cache, one query row): `decode_attention` over
  a `KVCache` of the config's dtype; other attention (prefill, encoders): NumPy.
`HostContext.kernel_use` collects, per op kind, which implementation ran (reported as provenance).
"""

from __future__ import annotations

import numpy as np

from harmony_ref.kernels.attention import KVCache, decode_attention
from harmony_ref.kernels.formats import format_of
from harmony_ref.kernels.norm import bias_add, gelu, layer_norm, norm_bias_gelu


class HostContext:
    """Shared state of one host run: spec, policy, RNG, weights, which implementation ran."""

    def __init__(self, spec, policy, context_tokens: int, seed: int = 0, kv_dtype: str = "fp16"):
        self.spec, self.policy, self.kv_dtype = spec, policy, kv_dtype
        self.context_tokens = context_tokens
        self.rng = np.random.default_rng(seed)
        self.kernel_use: dict[str, set[str]] = {}
        self._operands: dict[str, object] = {}

    def rand(self, *shape) -> np.ndarray:
        return self.rng.standard_normal(shape, dtype=np.float32)

    def used(self, kind: str, impl: str) -> None:
        self.kernel_use.setdefault(kind, set()).add(impl)

    def weight_operand(self, layer: str, n: int, k: int):
        """The layer's (n, k) weight in its policy format, prepared for its kernel (built once
        per layer name)."""
        if layer not in self._operands:
            fmt = self.policy.format_for(layer)
            f = format_of(fmt)
            stored = f.quantize(self.rand(n, k) * np.float32(0.02), fmt.group_size)
            self._operands[layer] = f.prepare(stored)
        return self._operands[layer]


def _matmul(op, ctx: HostContext):
    x = ctx.rand(op.m, op.k)
    w = ctx.weight_operand(op.layer, op.n, op.k)
    f = format_of(ctx.policy.format_for(op.layer))
    f.matmul(x, w)  # compiled (or loaded from Numba's cache) outside the timing
    ctx.used(f"matmul_{f.kind}" if f.quantized else "matmul_float", f.kernel)
    return lambda: f.matmul(x, w)


def _norm(op, ctx: HostContext):
    x, g, b = ctx.rand(op.m, op.n), ctx.rand(op.n), ctx.rand(op.n)
    eps = np.float32(1e-5)
    if ctx.spec.is_decoder:  # RMSNorm
        ctx.used("norm", "numpy rmsnorm")
        return lambda: x * (1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)) * g
    ctx.used("norm", "numba layer_norm")
    return lambda: layer_norm(x, g, b)


def _elementwise(op, ctx: HostContext):
    n = op.m * op.n
    a, b = ctx.rand(n), ctx.rand(n)
    return _ELEMENTWISE[op.kind](op, ctx, n, a, b)


def _activation(op, ctx: HostContext, n, a, b):
    if not ctx.spec.is_decoder:
        ctx.used("gelu", "numba gelu")
        return lambda: gelu(a)
    ctx.used("silu", "numpy silu")
    return lambda: a / (1 + np.exp(-a))


def _bias(op, ctx: HostContext, n, a, b):
    x2, bias = ctx.rand(op.m, op.n), ctx.rand(op.n)
    ctx.used("bias", "numba bias_add")
    return lambda: bias_add(x2, bias)


def _rope(op, ctx: HostContext, n, a, b):
    cos, sin = ctx.rand(n // 2), ctx.rand(n // 2)
    ctx.used("rope", "numpy rope")

    def rope():
        x1, x2 = a[: n // 2], a[n // 2 :]
        return np.concatenate((x1 * cos - x2 * sin, x2 * cos + x1 * sin))

    return rope


def _binary(fn):
    def build(op, ctx: HostContext, n, a, b):
        ctx.used(op.kind, "numpy")
        return lambda: fn(a, b)

    return build


_ELEMENTWISE = {  # op kind -> (op, ctx, n, a, b) -> the callable
    "activation": _activation,
    "bias": _bias,
    "rope": _rope,
    "gate_mul": _binary(np.multiply),
    "residual_add": _binary(np.add),
}


def _kv_cache(ctx: HostContext, length: int) -> KVCache:
    s = ctx.spec
    cache = KVCache(ctx.context_tokens, s.n_kv_heads, s.head_dim, ctx.kv_dtype)
    if length:
        cache.append(
            ctx.rand(length, s.n_kv_heads, s.head_dim), ctx.rand(length, s.n_kv_heads, s.head_dim)
        )
    return cache


def _kv_write(op, ctx: HostContext):
    s, m = ctx.spec, op.m
    pos = max(0, min(ctx.context_tokens - m, ctx.context_tokens // 2))
    kk, vv = ctx.rand(m, s.n_kv_heads, s.head_dim), ctx.rand(m, s.n_kv_heads, s.head_dim)
    cache = _kv_cache(ctx, 0)
    ctx.used("kv_write", f"KVCache.append ({ctx.kv_dtype})")

    def append():
        cache.length = pos  # rewrite the same slot each repeat
        cache.append(kk, vv)

    return append


def _attention(op, ctx: HostContext, graph, fused_softmax_pv: bool):
    """QK^T (and, when fused, softmax and P.V) for graph.tokens queries over graph.context keys."""
    s = ctx.spec
    b, rows, c = graph.batch, graph.tokens, graph.context
    q = ctx.rand(b, s.n_heads, rows, s.head_dim)
    k = ctx.rand(b, s.n_kv_heads, c, s.head_dim).astype(np.float16)
    v = ctx.rand(b, s.n_kv_heads, c, s.head_dim).astype(np.float16)
    group = s.n_heads // s.n_kv_heads
    scale = np.float32(1.0 / np.sqrt(s.head_dim))
    if fused_softmax_pv and rows == 1 and c <= ctx.context_tokens:
        ctx.used("attention", f"numba decode_attention ({ctx.kv_dtype} KV)")
        caches = [_kv_cache(ctx, c) for _ in range(b)]
        qs = [np.ascontiguousarray(q[i, :, 0, :]) for i in range(b)]

        def decode():
            for qi, cache in zip(qs, caches):
                decode_attention(qi, cache)

        return decode
    ctx.used("attention", "numpy attention")
    kf = np.repeat(k.astype(np.float32), group, axis=1)
    vf = np.repeat(v.astype(np.float32), group, axis=1)
    if not fused_softmax_pv:
        return lambda: (q @ kf.swapaxes(-1, -2)) * scale

    def f():
        sc = (q @ kf.swapaxes(-1, -2)) * scale
        sc = np.exp(sc - sc.max(axis=-1, keepdims=True))
        return (sc / sc.sum(axis=-1, keepdims=True)) @ vf

    return f


def _softmax(op, ctx: HostContext):
    x = ctx.rand(op.m * op.n)
    ctx.used("softmax", "numpy softmax")

    def f():
        e = np.exp(x - x.max())
        return e / e.sum()

    return f


def _attn_pv(op, ctx: HostContext, graph):
    s = ctx.spec
    b, rows, c = graph.batch, graph.tokens, graph.context
    p = ctx.rand(b, s.n_heads, rows, c)
    v = ctx.rand(b, s.n_heads, c, s.head_dim)
    ctx.used("attn_pv", "numpy matmul")
    return lambda: p @ v


def _embedding(op, ctx: HostContext):
    # A gather's cost is rows x hidden; the table only needs to be bigger than the caches.
    rows_in_table = min(ctx.spec.vocab, 16384)
    table = ctx.rand(rows_in_table, op.n).astype(np.float16)
    idx = ctx.rng.integers(0, rows_in_table, op.m)
    ctx.used("embedding", "numpy gather")
    return lambda: table[idx].astype(np.float32)


def _pool(op, ctx: HostContext):
    x = ctx.rand(op.m, op.n)
    ctx.used("pool", "numpy mean")
    return lambda: x.mean(axis=0)


def _norm_bias_gelu(op, ctx: HostContext):
    h = op.n
    x, g, b, bias = ctx.rand(op.m, h), ctx.rand(h), ctx.rand(h), ctx.rand(h)
    ctx.used("norm_bias_gelu", "numba norm_bias_gelu (fused)")
    return lambda: norm_bias_gelu(x, g, b, bias)


def build_op(op, prims: list, ctx: HostContext, graph):
    """Callable that runs fused graph op `op` (= the primitive ops `prims`, in order)."""
    kinds = [p.kind for p in prims]
    if kinds[0] == "norm" and "activation" in kinds and not ctx.spec.is_decoder:
        return _norm_bias_gelu(prims[0], ctx)
    calls = []
    i = 0
    while i < len(prims):
        p = prims[i]
        if tuple(kinds[i : i + 3]) == FUSED_ATTENTION:  # QK^T, softmax, P.V: one kernel
            calls.append(_attention(p, ctx, graph, True))
            i += 3
            continue
        calls.append(_BUILDERS[p.kind](p, ctx, graph))
        i += 1
    if len(calls) == 1:
        return calls[0]

    def chain():
        for c in calls:
            c()

    return chain


FUSED_ATTENTION = ("attn_qk", "softmax", "attn_pv")
_BUILDERS = {
    "attn_qk": lambda op, ctx, g: _attention(op, ctx, g, False),
    "matmul": lambda op, ctx, g: _matmul(op, ctx),
    "norm": lambda op, ctx, g: _norm(op, ctx),
    "rope": lambda op, ctx, g: _elementwise(op, ctx),
    "bias": lambda op, ctx, g: _elementwise(op, ctx),
    "activation": lambda op, ctx, g: _elementwise(op, ctx),
    "gate_mul": lambda op, ctx, g: _elementwise(op, ctx),
    "residual_add": lambda op, ctx, g: _elementwise(op, ctx),
    "kv_write": lambda op, ctx, g: _kv_write(op, ctx),
    "softmax": lambda op, ctx, g: _softmax(op, ctx),
    "attn_pv": lambda op, ctx, g: _attn_pv(op, ctx, g),
    "embedding": lambda op, ctx, g: _embedding(op, ctx),
    "pool": lambda op, ctx, g: _pool(op, ctx),
}
