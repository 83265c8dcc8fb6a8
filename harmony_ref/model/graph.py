"""The op graph a phone runtime executes for one phase of a model, built op by op (fused by
model/op.py's pass).

    g = build_graph(spec, policy, "prefill", tokens=512)           # the prompt, n tokens at once
    g = build_graph(spec, policy, "decode", context=1024)          # one new token, 1024 in context
    g.kernel_launches, g.flops, g.dram_bytes; g.ops[i].name, .kind, .dtype, .weight_bytes, ...

What an op carries (`Op`), how a graph holds ops (`Segment`, `Graph`) and the fusion pass
(`fuse`) live in model/op.py; this module builds a model's ops phase by phase.

Prefill may start from a cached prefix: `build_graph(spec, policy, "prefill", tokens=new,
context=cached + new)` runs the new rows only, attending over every position (prompt prefix reuse).

Conventions: attention FLOPs count the whole masked score matrix (2 x rows x context x q_dim for
QK^T and again for P.V), as a runtime without causal block skipping computes it; grouped-query
attention reads each KV head once for its whole group. Prefill runs the final norm and lm_head
on the last position only (that is all the first token needs).
"""

from __future__ import annotations

import functools

import numpy as np

from harmony_ref.model.op import Graph, Op, Segment, fuse
from harmony_ref.model.prune import pruned_spec
from harmony_ref.model.spec import ModelSpec
from harmony_ref.quant.policy import Policy, WeightFormat, format_for_rows

PHASES = ("prefill", "decode")
ACT_BYTES = 2  # activations in fp16
NORM_FLOPS_PER_ELEMENT = 5  # square, sum, rsqrt-scale, weight (and bias) multiply
SOFTMAX_FLOPS_PER_ELEMENT = 5  # max, subtract, exp, sum, divide
SILU_FLOPS_PER_ELEMENT = 4  # exp, add, divide, multiply
GELU_FLOPS_PER_ELEMENT = 8  # tanh approximation
ROPE_FLOPS_PER_ELEMENT = 3  # two multiplies and an add per rotated element
KV_INT8_SCALE_BYTES = (
    4  # one float32 scale per token per KV head, for K and for V, as kernels.KVCache stores it
)

# What a runtime must implement: every `Op.op` a graph can hold.
OP_TYPES = (
    "matmul",
    "embedding",
    "rms_norm",
    "layer_norm",
    "rope",
    "attn_qk",
    "softmax",
    "attn_pv",
    "bias",
    "silu",
    "gelu",
    "gelu_tanh",
    "gate_mul",
    "residual_add",
    "kv_write",
    "pool",
)
ACTIVATION_FLOPS = {
    "silu": SILU_FLOPS_PER_ELEMENT,
    "gelu": GELU_FLOPS_PER_ELEMENT,
    "gelu_tanh": GELU_FLOPS_PER_ELEMENT,
}


def weight_nbytes(fmt: WeightFormat, n: int, k: int, layer: str) -> int:
    """Stored bytes of an (n, k) weight. An INT4 group that does not divide K is narrowed to the
    largest one that does, as the runtime stores it (quant/policy.py's int4_format_for_rows:
    SmolLM2's K = 576 rows take int4-g128 as g64)."""
    return format_for_rows(fmt, k).nbytes(n, k)


def kv_bytes_per_token_per_layer(spec: ModelSpec, kv_dtype: str) -> int:
    """K and V of one token in one layer: 2 x kv_heads x head_dim x bytes (+ int8 scales)."""
    if kv_dtype == "fp16":
        return 2 * spec.kv_dim * 2
    return 2 * (spec.kv_dim + spec.n_kv_heads * KV_INT8_SCALE_BYTES)


class _Builder:
    def __init__(
        self,
        spec: ModelSpec,
        policy: Policy,
        rows: int,
        context: int,
        batch: int,
        kv_dtype: str,
        phase: str,
    ):
        self.spec, self.policy, self.rows, self.ctx, self.batch = spec, policy, rows, context, batch
        self.kv_dtype, self.phase = kv_dtype, phase
        self.ops: list[Op] = []

    def add(self, **kw) -> None:
        self.ops.append(Op(**kw))

    def matmul(
        self, layer: str, n: int, k: int, rows: int, bias: bool, fmt: WeightFormat | None = None
    ):
        fmt = fmt or self.policy.format_for(layer)
        a = ACT_BYTES
        # [activations] gives every int8 Linear static int8 activations (runtime/llama.py);
        # dynamic_activations = "int8" every int4/int8 one, made on the fly (W4A8, W8A8)
        static = self.policy.activations is not None and fmt.facts.w8a8
        dynamic = self.policy.dynamic_activations == "int8" and fmt.facts.dynamic_int8
        act = "int8" if static or dynamic else "fp16"
        self.add(
            name=layer,
            kind="matmul",
            layer=layer,
            dtype=fmt.compute_dtype,
            act_dtype=act,
            flops=2.0 * rows * n * k,
            weight_bytes=weight_nbytes(fmt, n, k, layer),
            act_in_bytes=rows * k * a,
            act_out_bytes=rows * n * a,
            tile_bytes=rows * k * a,
            m=rows,
            n=n,
            k=k,
        )
        if bias:
            self.elementwise(f"{layer}.bias", "bias", layer, rows, n, 1, extra_weight=n * a)

    def elementwise(
        self,
        name: str,
        kind: str,
        layer: str,
        m: int,
        n: int,
        flops_per: float,
        n_inputs: int = 1,
        extra_weight: float = 0.0,
        reads_prev: bool = True,
        op: str = "",
    ):
        """An op reading `n_inputs` (m, n) tensors of fp16 values (the first being the previous
        op's output, unless `reads_prev` is False) and writing one."""
        a, elements = ACT_BYTES, m * n
        self.add(
            name=name,
            kind=kind,
            layer=layer,
            vector_flops=float(elements * flops_per),
            weight_bytes=extra_weight,
            act_in_bytes=n_inputs * elements * a,
            act_out_bytes=elements * a,
            reads_prev_bytes=elements * a if reads_prev else 0.0,
            m=m,
            n=n,
            op=op,
        )

    def norm(self, name: str, rows: int, with_bias: bool):
        h, a = self.spec.hidden, ACT_BYTES
        self.add(
            name=name,
            kind="norm",
            layer=name,
            op="rms_norm" if self.spec.is_decoder else "layer_norm",
            vector_flops=float(rows * h * NORM_FLOPS_PER_ELEMENT),
            weight_bytes=h * a * (2 if with_bias else 1),
            act_in_bytes=rows * h * a,
            act_out_bytes=rows * h * a,
            m=rows,
            n=h,
        )

    def attention(self, p: str, rows: int, kv_from_cache: bool, layer: int = -1):
        """QK^T, softmax, P.V for `rows` queries over `ctx` positions, per request (over the
        span their windows cover on a sliding-window layer: ModelSpec.keys_seen)."""
        s, a, b = self.spec, ACT_BYTES, self.batch
        ctx = s.keys_seen(layer, rows, self.ctx)
        window = s.sliding_window if s.is_local(layer) else 0
        q_elems = b * rows * s.q_dim
        scores = b * s.n_heads * rows * ctx
        if kv_from_cache:
            per_pos = kv_bytes_per_token_per_layer(s, self.kv_dtype) // 2  # K or V alone
            k_bytes, k_act = b * ctx * per_pos, 0.0
            dequant = 0.0 if self.kv_dtype == "fp16" else b * ctx * s.kv_dim * 1.0
        else:  # an encoder reads K and V as activations
            k_bytes, k_act = 0.0, b * ctx * s.kv_dim * a
            dequant = 0.0
        self.add(
            name=f"{p}.attn_qk",
            kind="attn_qk",
            layer=p,
            flops=2.0 * b * rows * ctx * s.q_dim,
            vector_flops=dequant,
            kv_read_bytes=k_bytes,
            act_in_bytes=q_elems * a + k_act,
            act_out_bytes=scores * a,
            tile_bytes=q_elems * a,
            m=b * rows,
            n=ctx,
            k=s.head_dim,
            window=window,
        )
        self.add(
            name=f"{p}.softmax",
            kind="softmax",
            layer=p,
            vector_flops=float(scores * SOFTMAX_FLOPS_PER_ELEMENT),
            act_in_bytes=scores * a,
            act_out_bytes=scores * a,
            reads_prev_bytes=scores * a,
            m=b * s.n_heads * rows,
            n=ctx,
            window=window,
        )
        self.add(
            name=f"{p}.attn_pv",
            kind="attn_pv",
            layer=p,
            flops=2.0 * b * rows * ctx * s.q_dim,
            vector_flops=dequant,
            kv_read_bytes=k_bytes,
            act_in_bytes=scores * a + k_act,
            act_out_bytes=q_elems * a,
            reads_prev_bytes=scores * a,
            tile_bytes=scores * a,
            m=b * rows,
            n=ctx,
            k=s.head_dim,
            window=window,
        )

    def decoder_layer(self, i: int):
        s, a, m = self.spec, ACT_BYTES, self.rows * self.batch
        p = f"model.layers.{i}"
        self.norm(f"{p}.input_layernorm", m, with_bias=False)
        for lin in s.layer_linears(i)[:3]:
            self.matmul(lin.name, lin.n_out, lin.k_in, m, lin.bias)
        # rope rotates q and k; the KV write stores k (from rope) and v (from v_proj) in the cache.
        self.elementwise(
            f"{p}.self_attn.rope",
            "rope",
            f"{p}.self_attn",
            m,
            s.q_dim + s.kv_dim,
            ROPE_FLOPS_PER_ELEMENT,
            reads_prev=False,
        )  # q and k, not v_proj's output
        kv_w = m * kv_bytes_per_token_per_layer(s, self.kv_dtype)
        quant = 0.0 if self.kv_dtype == "fp16" else m * 2 * s.kv_dim * 3.0  # absmax, scale, round
        self.add(
            name=f"{p}.self_attn.kv_write",
            kind="kv_write",
            layer=f"{p}.self_attn",
            vector_flops=quant,
            act_in_bytes=m * 2 * s.kv_dim * a,
            kv_write_bytes=kv_w,
            reads_prev_bytes=m * s.kv_dim * a,
            m=m,
            n=2 * s.kv_dim,
        )
        self.attention(f"{p}.self_attn", self.rows, kv_from_cache=True, layer=i)
        o = s.layer_linears(i)[3]
        self.matmul(o.name, o.n_out, o.k_in, m, o.bias)
        self.elementwise(f"{p}.residual_attn", "residual_add", p, m, s.hidden, 1, n_inputs=2)
        self.norm(f"{p}.post_attention_layernorm", m, with_bias=False)
        gate, up, down = s.layer_linears(i)[4:]
        self.matmul(gate.name, gate.n_out, gate.k_in, m, gate.bias)
        self.elementwise(
            f"{p}.mlp.act_fn",
            "activation",
            f"{p}.mlp",
            m,
            s.intermediate,
            ACTIVATION_FLOPS[s.activation],
            op=s.activation,
        )
        self.matmul(up.name, up.n_out, up.k_in, m, up.bias)
        self.elementwise(
            f"{p}.mlp.gate_mul", "gate_mul", f"{p}.mlp", m, s.intermediate, 1, n_inputs=2
        )
        self.matmul(down.name, down.n_out, down.k_in, m, down.bias)
        self.elementwise(f"{p}.residual_mlp", "residual_add", p, m, s.hidden, 1, n_inputs=2)

    def encoder_layer(self, i: int):
        s, m = self.spec, self.rows * self.batch
        p = f"encoder.layer.{i}"
        q, k, v, o, inter, out = s.layer_linears(i)
        for lin in (q, k, v):
            self.matmul(lin.name, lin.n_out, lin.k_in, m, lin.bias)
        self.attention(f"{p}.attention.self", self.rows, kv_from_cache=False)
        self.matmul(o.name, o.n_out, o.k_in, m, o.bias)
        self.elementwise(
            f"{p}.attention.output.residual", "residual_add", p, m, s.hidden, 1, n_inputs=2
        )
        self.norm(f"{p}.attention.output.LayerNorm", m, with_bias=True)
        self.matmul(inter.name, inter.n_out, inter.k_in, m, inter.bias)
        self.elementwise(
            f"{p}.intermediate.gelu",
            "activation",
            p,
            m,
            s.intermediate,
            ACTIVATION_FLOPS[s.activation],
            op=s.activation,
        )
        self.matmul(out.name, out.n_out, out.k_in, m, out.bias)
        self.elementwise(f"{p}.output.residual", "residual_add", p, m, s.hidden, 1, n_inputs=2)
        self.norm(f"{p}.output.LayerNorm", m, with_bias=True)

    def embedding(self):
        s, m, a = self.spec, self.rows * self.batch, ACT_BYTES
        if s.is_decoder:
            # A tied table is stored once, in lm_head's format; a gather reads one row per token.
            table = "lm_head" if s.tie_embeddings else s.embed_name
            fmt = self.policy.format_for(table)
            self.add(
                name=s.embed_name,
                kind="embedding",
                layer=s.embed_name,
                weight_bytes=weight_nbytes(fmt, m, s.hidden, table),
                act_out_bytes=m * s.hidden * a,
                m=m,
                n=s.hidden,
            )
            return
        fmt = self.policy.format_for(s.embed_name)
        self.add(
            name=s.embed_name,
            kind="embedding",
            layer=s.embed_name,
            vector_flops=float(2 * m * s.hidden),  # word + position + token type
            weight_bytes=weight_nbytes(fmt, m, s.hidden, s.embed_name) + 2 * m * s.hidden * a,
            act_out_bytes=m * s.hidden * a,
            m=m,
            n=s.hidden,
        )
        self.norm("embeddings.LayerNorm", m, with_bias=True)

    def head(self):
        s, b, a = self.spec, self.batch, ACT_BYTES
        if s.is_decoder:
            self.norm("model.norm", b, with_bias=False)  # last position of each request only
            lm = s.head_linear()
            self.matmul(lm.name, lm.n_out, lm.k_in, b, lm.bias)
            return
        # sentence-transformers mean pooling over the tokens (the BERT pooler is unused).
        m = self.rows * b
        self.add(
            name="pooling.mean",
            kind="pool",
            layer="pooling",
            vector_flops=float(m * s.hidden),
            act_in_bytes=m * s.hidden * a,
            act_out_bytes=b * s.hidden * a,
            m=m,
            n=s.hidden,
        )

    def take(self) -> tuple[Op, ...]:
        ops, self.ops = tuple(self.ops), []
        return ops


def window_steps(steps, window):
    """The decode steps an op's context-dependent quantities follow, for graphs built at contexts
    1 and 2 (step s: context 1 + s): all of them, or on a sliding-window op (`Op.window` > 0)
    none past the step where its window fills, min(s, window - 1). `window` may be an array of
    ops' windows broadcast against `steps`."""
    steps = np.asarray(steps, dtype=np.float64)
    window = np.asarray(window)
    return np.where(window > 0, np.minimum(steps, window - 1), steps)


@functools.lru_cache(maxsize=64)
def layer_groups(
    spec: ModelSpec, policy: Policy
) -> tuple[tuple[tuple[WeightFormat, ...], tuple[int, ...]], ...]:
    """Blocks grouped by the weight formats the policy gives their projections and by whether
    they attend through a sliding window: ((formats of layer_linears in order, block indices),
    ...)."""
    groups: dict[tuple, list[int]] = {}
    for i in range(spec.n_layers):
        key = tuple(policy.format_for(lin.name) for lin in spec.layer_linears(i))
        key += (spec.is_local(i),)
        groups.setdefault(key, []).append(i)
    return tuple((k, tuple(v)) for k, v in groups.items())


@functools.lru_cache(maxsize=512)
def build_graph(
    spec: ModelSpec,
    policy: Policy,
    phase: str,
    tokens: int = 1,
    context: int | None = None,
    fused: bool = True,
    kv_dtype: str = "fp16",
    batch: int = 1,
    cpu_ops: frozenset[str] = frozenset(),
) -> Graph:
    """Ops of one phase. prefill: `tokens` prompt tokens attending to `context` positions
    (default: tokens; more when a cached prefix precedes them). decode: one token per request
    attending to `context` positions (the cached ones plus itself). `cpu_ops`: op types left
    unfused (they run on the CPU). Cached: graphs are immutable and the cost model asks for the
    same few again and again."""
    if phase not in PHASES:
        raise ValueError(f"phase {phase!r}: must be one of {list(PHASES)}")
    spec = pruned_spec(spec, policy.prune)  # a [prune] policy: the smaller matrices' shapes
    policy = policy.bind(spec.weight_rows(), spec.n_layers)  # a mix (q4_k_m): for this model
    if phase == "decode":
        if not spec.is_decoder:
            raise ValueError(f"model {spec.name!r} is an encoder: it has no decode phase")
        rows, ctx = 1, (context if context is not None else tokens)
    else:
        rows, ctx = tokens, (context if context is not None else tokens)
    for name, v in (("tokens", rows), ("context", ctx), ("batch", batch)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"graph: {name} = {v!r}: must be an int >= 1")
    if ctx < rows:
        raise ValueError(
            f"graph: context = {ctx} < tokens = {rows}: a prefill attends to at least its own rows"
        )
    b = _Builder(spec, policy, rows, ctx, batch, kv_dtype, phase)
    finish = functools.partial(fuse, cpu_ops=frozenset(cpu_ops)) if fused else tuple
    b.embedding()
    segments = [Segment(finish(b.take()))]
    prefix = "model.layers." if spec.is_decoder else "encoder.layer."
    for _, layers in layer_groups(spec, policy):
        (b.decoder_layer if spec.is_decoder else b.encoder_layer)(layers[0])
        segments.append(Segment(finish(b.take()), layers, prefix))
    b.head()
    segments.append(Segment(finish(b.take())))
    return Graph(
        spec.name,
        policy.name,
        phase,
        rows,
        ctx,
        batch,
        fused,
        kv_dtype,
        tuple(segments),
        policy.float16,
    )


@functools.lru_cache(maxsize=64)
def op_types_used(spec: ModelSpec, policy: Policy) -> tuple[str, ...]:
    """Every operator type (OP_TYPES) the model's prefill and decode graphs run, in first-use
    order: what a runtime must implement (`harmony-ref check-ops`)."""
    phases = [build_graph(spec, policy, "prefill", tokens=1, fused=False)]
    if spec.is_decoder:
        phases.append(build_graph(spec, policy, "decode", context=1, fused=False))
    seen: dict[str, None] = {}
    for g in phases:
        for op, _ in g.unique_ops():
            seen.setdefault(op.op_type, None)
    return tuple(seen)


def op_counts(graph: Graph) -> dict[str, int]:
    """How many times each operator type runs in `graph` (a fused op counts as its first op)."""
    out: dict[str, int] = {}
    for op, count in graph.unique_ops():
        out[op.op_type] = out.get(op.op_type, 0) + count
    return out
