"""Turn the ops of a model graph (harmony_ref.model.graph) into host calls with real inputs.

`build_op(op, prims, ctx)` returns a zero-argument callable that executes graph op `op` on this
CPU: `prims` are the primitive (unfused) ops it stands for (itself plus the epilogues the fusion
pass merged into it), each with its shape recovered from its own FLOP and byte counts. Weights
are random, quantized to the layer's real format; activations are random of the right shape.
Only the time matters here, not the values.

Which code runs what:
- matmul: `matmul_w4` / `matmul_w8` (Numba kernels) for INT4 / INT8 layers; FP16/FP32 layers run
  as a float32 NumPy matmul (this CPU has no fast fp16 path).
- norm + bias + GELU fused in the graph: the fused `norm_bias_gelu` kernel when the kernels
  package has it; everything else: one call per primitive op (NumPy), so an unfused graph pays
  one call per op and a fused one only where a fused host kernel exists.
- decode attention (QK^T, softmax, P.V over the KV cache): `decode_attention` when available.
`KERNEL_USE` collects, per op kind, which implementation ran (reported as provenance).
"""

from __future__ import annotations

import numpy as np

ACT_BYTES = 2  # the graph counts fp16 activations


class _Kernels:
    """Kernel functions by name, from harmony_ref.kernels or its modules; None when absent."""

    MODULES = ("", ".matmul", ".norm", ".attention")

    def __init__(self):
        import importlib

        self.mods = []
        for suffix in self.MODULES:
            try:
                self.mods.append(importlib.import_module("harmony_ref.kernels" + suffix))
            except ImportError:
                pass

    def __getattr__(self, name):
        for m in self.__dict__.get("mods", ()):
            if hasattr(m, name):
                return getattr(m, name)
        return None


def _kernels():
    return _Kernels()


class HostContext:
    """Shared state of one host run: spec, policy, RNG, KV caches, which implementation ran."""

    def __init__(self, spec, policy, context_tokens: int, seed: int = 0, kv_dtype: str = "fp16"):
        self.spec, self.policy, self.kv_dtype = spec, policy, kv_dtype
        self.context_tokens = context_tokens
        self.rng = np.random.default_rng(seed)
        self.linears = {lin.name: lin for lin in spec.linears()}
        self.kernel_use: dict[str, set[str]] = {}
        self.k = _kernels()
        self._weights: dict[str, object] = {}

    def rand(self, *shape) -> np.ndarray:
        return self.rng.standard_normal(shape, dtype=np.float32)

    def used(self, kind: str, impl: str) -> None:
        self.kernel_use.setdefault(kind, set()).add(impl)

    def weight(self, layer: str, n: int, k: int):
        """The layer's weight in its policy format (built once per layer name)."""
        if layer in self._weights:
            return self._weights[layer]
        fmt = self.policy.format_for(layer)
        w = self.rand(n, k) * np.float32(0.02)
        if fmt.kind == "int4":
            from harmony_ref.quant.int4 import quantize_int4

            w = quantize_int4(w, fmt.group_size, fmt.scheme)
        elif fmt.kind == "int8":
            from harmony_ref.quant.int8 import quantize_int8

            w = quantize_int8(w)
        self._weights[layer] = w
        return w

    def weight_nbytes(self) -> int:
        return sum(getattr(w, "nbytes", 0) for w in self._weights.values())


def _rows(elements: float, width: int, what: str) -> int:
    r = elements / width
    if abs(r - round(r)) > 1e-6 or r < 1:
        raise ValueError(f"host: cannot recover the rows of {what}: {elements} elements / width {width}")
    return int(round(r))


def _matmul(op, ctx: HostContext):
    lin = ctx.linears.get(op.layer)
    if lin is None:
        raise ValueError(f"host: matmul op {op.name} has no linear layer {op.layer!r} in {ctx.spec.name}")
    n, k = lin.n_out, lin.k_in
    rows = _rows(op.flops / 2.0, n * k, op.name)
    x = ctx.rand(rows, k)
    w = ctx.weight(op.layer, n, k)
    fmt = ctx.policy.format_for(op.layer)
    fn = ctx.k.matmul_w4 if fmt.kind == "int4" else ctx.k.matmul_w8 if fmt.kind == "int8" else None
    if fn is not None:
        fn(x, w)  # builds the kernel layout once, outside the timing
        ctx.used(f"matmul_{fmt.kind}", f"numba {fn.__name__}")
        return lambda: fn(x, w)
    wt = np.ascontiguousarray(w.T) if isinstance(w, np.ndarray) else None
    if wt is None:
        raise ValueError(f"host: no kernel for {fmt.kind} matmul (harmony_ref.kernels missing)")
    ctx.used("matmul_float", "numpy float32 matmul")
    return lambda: x @ wt


def _norm(op, ctx: HostContext):
    h = ctx.spec.hidden
    rows = _rows(op.act_in_bytes / ACT_BYTES, h, op.name)
    x, g, b = ctx.rand(rows, h), ctx.rand(h), ctx.rand(h)
    eps = np.float32(1e-5)
    if ctx.spec.is_decoder:  # RMSNorm
        ctx.used("norm", "numpy rmsnorm")
        return lambda: x * (1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)) * g
    ln = ctx.k.layer_norm
    if ln is not None:
        ctx.used("norm", "numba layer_norm")
        return lambda: ln(x, g, b)
    ctx.used("norm", "numpy layernorm")

    def f():
        mu = x.mean(axis=-1, keepdims=True)
        d = x - mu
        return d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + eps) * g + b
    return f


def _elementwise(op, ctx: HostContext):
    n = int(round(op.act_out_bytes / ACT_BYTES))
    a, b = ctx.rand(n), ctx.rand(n)
    kind = op.kind
    if kind == "activation" and not ctx.spec.is_decoder:
        gelu = ctx.k.gelu
        if gelu is not None:
            ctx.used("gelu", "numba gelu")
            return lambda: gelu(a)
        ctx.used("gelu", "numpy gelu")
        c = np.float32(np.sqrt(2 / np.pi))
        return lambda: 0.5 * a * (1 + np.tanh(c * (a + np.float32(0.044715) * a * a * a)))
    if kind == "activation":
        ctx.used("silu", "numpy silu")
        return lambda: a / (1 + np.exp(-a))
    if kind == "bias":
        width = _bias_width(op, ctx)
        x2, bias = ctx.rand(n // width, width), ctx.rand(width)
        bias_add = ctx.k.bias_add
        if bias_add is not None:
            ctx.used("bias", "numba bias_add")
            return lambda: bias_add(x2, bias)
        ctx.used("bias", "numpy add")
        return lambda: x2 + bias
    if kind == "rope":
        cos, sin = ctx.rand(n // 2), ctx.rand(n // 2)
        ctx.used("rope", "numpy rope")

        def rope():
            x1, x2 = a[: n // 2], a[n // 2:]
            return np.concatenate((x1 * cos - x2 * sin, x2 * cos + x1 * sin))
        return rope
    ctx.used(kind, "numpy")  # gate_mul, residual_add
    return (lambda: a * b) if kind == "gate_mul" else (lambda: a + b)


def _bias_width(op, ctx: HostContext) -> int:
    lin = ctx.linears.get(op.layer)
    return lin.n_out if lin is not None else ctx.spec.hidden


def _kv_cache(ctx: HostContext, length: int):
    s = ctx.spec
    cache = ctx.k.KVCache(ctx.context_tokens, s.n_kv_heads, s.head_dim, ctx.kv_dtype)
    if length:
        cache.append(ctx.rand(length, s.n_kv_heads, s.head_dim), ctx.rand(length, s.n_kv_heads, s.head_dim))
    return cache


def _kv_write(op, ctx: HostContext):
    s = ctx.spec
    m = _rows(op.act_in_bytes / ACT_BYTES, 2 * s.kv_dim, op.name)
    pos = max(0, min(ctx.context_tokens - m, ctx.context_tokens // 2))
    kk, vv = ctx.rand(m, s.n_kv_heads, s.head_dim), ctx.rand(m, s.n_kv_heads, s.head_dim)
    if ctx.k.KVCache is not None:
        cache = _kv_cache(ctx, 0)
        ctx.used("kv_write", f"KVCache.append ({ctx.kv_dtype})")

        def append():
            cache.length = pos  # rewrite the same slot each repeat
            cache.append(kk, vv)
        return append
    store = np.zeros((2, ctx.context_tokens, s.n_kv_heads, s.head_dim), np.float16)
    ctx.used("kv_write", "numpy fp16 store")

    def f():
        store[0, pos:pos + m] = kk
        store[1, pos:pos + m] = vv
    return f


def _attention(op, ctx: HostContext, graph, fused_softmax_pv: bool):
    """QK^T (and, when fused, softmax and P.V) for graph.tokens queries over graph.context keys."""
    s = ctx.spec
    b, rows, c = graph.batch, graph.tokens, graph.context
    q = ctx.rand(b, s.n_heads, rows, s.head_dim)
    k = ctx.rand(b, s.n_kv_heads, c, s.head_dim).astype(np.float16)
    v = ctx.rand(b, s.n_kv_heads, c, s.head_dim).astype(np.float16)
    group = s.n_heads // s.n_kv_heads
    scale = np.float32(1.0 / np.sqrt(s.head_dim))
    da = ctx.k.decode_attention
    if fused_softmax_pv and rows == 1 and da is not None and c <= ctx.context_tokens:
        ctx.used("attention", f"numba decode_attention ({ctx.kv_dtype} KV)")
        caches = [_kv_cache(ctx, c) for _ in range(b)]
        qs = [np.ascontiguousarray(q[i, :, 0, :]) for i in range(b)]

        def decode():
            for qi, cache in zip(qs, caches):
                da(qi, cache)
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
    n = int(round(op.act_out_bytes / ACT_BYTES))
    x = ctx.rand(n)
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
    h = ctx.spec.hidden
    m = _rows(op.act_out_bytes / ACT_BYTES, h, op.name)
    # A gather's cost is rows x hidden; the table only needs to be bigger than the caches.
    rows_in_table = min(ctx.spec.vocab, 16384)
    table = ctx.rand(rows_in_table, h).astype(np.float16)
    idx = ctx.rng.integers(0, rows_in_table, m)
    ctx.used("embedding", "numpy gather")
    return lambda: table[idx].astype(np.float32)


def _pool(op, ctx: HostContext):
    h = ctx.spec.hidden
    m = _rows(op.act_in_bytes / ACT_BYTES, h, op.name)
    x = ctx.rand(m, h)
    ctx.used("pool", "numpy mean")
    return lambda: x.mean(axis=0)


def _norm_bias_gelu(ctx: HostContext, rows: int):
    nbg = ctx.k.norm_bias_gelu
    if nbg is None:
        return None
    h = ctx.spec.hidden
    x, g, b, bias = ctx.rand(rows, h), ctx.rand(h), ctx.rand(h), ctx.rand(h)
    ctx.used("norm_bias_gelu", "numba norm_bias_gelu (fused)")
    return lambda: nbg(x, g, b, bias)


def build_op(op, prims: list, ctx: HostContext, graph):
    """Callable that runs fused graph op `op` (= the primitive ops `prims`, in order)."""
    kinds = [p.kind for p in prims]
    if kinds[0] == "norm" and "activation" in kinds and not ctx.spec.is_decoder:
        fn = _norm_bias_gelu(ctx, _rows(prims[0].act_in_bytes / ACT_BYTES, ctx.spec.hidden, op.name))
        if fn is not None:
            return fn
    calls = []
    i = 0
    while i < len(prims):
        p = prims[i]
        if p.kind == "attn_qk":
            fused = i + 2 < len(prims) and prims[i + 1].kind == "softmax" and prims[i + 2].kind == "attn_pv"
            calls.append(_attention(p, ctx, graph, fused))
            i += 3 if fused else 1
            continue
        calls.append(_BUILDERS[p.kind](p, ctx, graph))
        i += 1
    if len(calls) == 1:
        return calls[0]

    def chain():
        for c in calls:
            c()
    return chain


_BUILDERS = {
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
