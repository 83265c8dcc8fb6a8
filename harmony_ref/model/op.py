"""An op of the graph a phone runtime executes, the graph that holds them, and the fusion pass
(model/graph.py builds the ops of a model's phase).

Each `Op` carries what the cost model needs and nothing device-specific:
- `flops`: matrix-unit work. `dtype` is its weight operand's dtype (the weight format's: fp16,
  int8 or int4; fp16 for attention) and `act_dtype` its activations' ("int8" for a Linear the
  policy's `[activations]` table gives static int8 scales, W8A8; else "fp16"); the dtype it
  computes in, and so the peak it runs at, also depends on the device: device/soc.py
  `compute_dtype`. `vector_flops`: elementwise/reduction work (norms, softmax,
  activations, rope, bias, residual adds) run on the vector unit in fp16.
- bytes it moves through DRAM: `weight_bytes` (the weight's real stored size, scales and zero
  points included, from `WeightFormat.nbytes`), `act_in_bytes`/`act_out_bytes` (fp16
  activations), `kv_read_bytes`/`kv_write_bytes` (the KV cache, fp16 or int8 + float32 scales).
- `tile_bytes`: the activation block a matmul keeps on chip to stream its weights (or K/V) once
  (the cost model re-streams them when the block does not fit the profile's on-chip buffer).
- `reads_prev_bytes`: how much of its input is the previous op's output. Fusing the op into its
  predecessor keeps exactly that tensor on chip: its write and its read leave DRAM traffic.
- its shape `m, n, k`, as the builder knew it, so whoever runs the op (the host backend) never
  recovers it from the counts: a matmul is x (m, k) @ W.T with W (n, k); a norm, bias,
  activation, gate multiply, residual add, rope, KV write, embedding gather or pool works on
  (m, n) (rope: n = q_dim + kv_dim rotated values per row; KV write: n = 2 x kv_dim); attention
  (QK^T, P.V) has m = batch x query rows, n = positions attended to, k = head_dim, and softmax
  m = batch x heads x query rows, n = positions. m counts every request of the batch. A fused op
  keeps the shape of its first op.

Fusion (`fuse`, on by default): every op whose kind is in `EPILOGUE_KINDS` (bias, activation,
gate multiply, residual add, KV-cache write, softmax, attention's P.V) merges into the op before
it. That covers what phone runtimes fuse: norm + bias + activation and matmul + bias + GELU become
one kernel, residual adds ride on the projection before them, rope writes the KV cache, and
scores -> softmax -> P.V is one flash-attention kernel (the score matrix never reaches DRAM).
Merging only ever removes launches and bytes; it never changes FLOPs.

Operator types (`Op.op`, one of model/graph.py `OP_TYPES`) are what a runtime must implement to run
the op: the kind, except that a norm is `rms_norm` (decoders) or `layer_norm` (encoders) and an
activation is the spec's own (`silu`, `gelu`, `gelu_tanh`). A device profile lists the ones its NPU
runs (device/ops.py); `build_graph(..., cpu_ops=...)` leaves the ops of those types unfused, as a
runtime that hands them to the CPU must (a kernel cannot be half on each side).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

EPILOGUE_KINDS = frozenset(
    {"bias", "activation", "gate_mul", "residual_add", "kv_write", "softmax", "attn_pv"}
)
PROJECTION_KINDS = frozenset({"matmul"})  # activations times a weight matrix (Op.projection)
FUSED_KIND = {"attn_qk": "attention"}  # QK^T with its epilogues (softmax, P.V): one kernel


@dataclass(frozen=True)
class Op:
    name: str
    # matmul | embedding | norm | rope | attn_qk | softmax | attn_pv | bias | activation | gate_mul |
    # residual_add | kv_write | pool; "attention" once fused (QK^T + softmax + P.V in one kernel)
    kind: str
    layer: str  # module path; for projections the name a policy pattern matches
    dtype: str = "fp16"  # weight operand dtype of `flops`: fp16 | int8 | int4
    act_dtype: str = "fp16"  # activations: "int8" = static int8 scales (W8A8), else fp16
    flops: float = 0.0
    vector_flops: float = 0.0
    weight_bytes: float = 0.0
    act_in_bytes: float = 0.0
    act_out_bytes: float = 0.0
    kv_read_bytes: float = 0.0
    kv_write_bytes: float = 0.0
    tile_bytes: float = 0.0
    reads_prev_bytes: float = 0.0
    fused: tuple[str, ...] = ()  # names of the ops merged into this one
    m: int = 0  # shape, see the module docstring
    n: int = 0
    k: int = 0
    op: str = ""  # operator type (model/graph.py OP_TYPES); "" = the kind
    # a sliding-window layer's attention: its keys stop growing with the context at this many
    # (ModelSpec.sliding_window); 0: they grow with it
    window: int = 0

    @property
    def projection(self) -> bool:
        """A Linear: activations times a weight matrix in the policy's format."""
        return self.kind in PROJECTION_KINDS

    @property
    def op_type(self) -> str:
        return self.op or self.kind

    @property
    def dram_bytes(self) -> float:
        return (
            self.weight_bytes
            + self.act_in_bytes
            + self.act_out_bytes
            + self.kv_read_bytes
            + self.kv_write_bytes
        )

    @property
    def streamed_bytes(self) -> float:
        """Weights and K/V streamed past the on-chip activation block (re-read per piece of a
        block that does not fit the on-chip buffer; see device/cost.py)."""
        return self.weight_bytes + self.kv_read_bytes

    @property
    def other_bytes(self) -> float:
        """Activations in and out and the KV-cache write: moved once."""
        return self.act_in_bytes + self.act_out_bytes + self.kv_write_bytes

    @property
    def total_flops(self) -> float:
        return self.flops + self.vector_flops


@dataclass(frozen=True)
class Segment:
    """Ops run once (`layers` empty) or once per block in `layers`. Identical blocks (same weight
    formats) share one template, built for block `layers[0]`, so a 28-layer graph is built from
    one block's ops: the cost model never needs more than the template and its count."""

    ops: tuple[Op, ...]
    layers: tuple[int, ...] = ()
    prefix: str = ""  # "model.layers." or "encoder.layer."

    @property
    def count(self) -> int:
        return len(self.layers) or 1

    def expand(self) -> list[Op]:
        if not self.layers:
            return list(self.ops)
        t = f"{self.prefix}{self.layers[0]}."
        out = []
        for i in self.layers:
            r = f"{self.prefix}{i}."
            out.extend(
                op
                if i == self.layers[0]
                else dataclasses.replace(
                    op,
                    name=op.name.replace(t, r),
                    layer=op.layer.replace(t, r),
                    fused=tuple(f.replace(t, r) for f in op.fused),
                )
                for op in self.ops
            )
        return out


@dataclass(frozen=True)
class Graph:
    spec: str
    policy: str
    phase: str
    tokens: int  # rows per request: the prompt length in prefill, 1 in decode
    context: int  # positions attended to (prefill: tokens; decode: cached + the new one)
    batch: int
    fused: bool
    kv_dtype: str
    segments: tuple[Segment, ...]
    float16: str = "fp16"  # the policy's 16-bit float format (fp16 | bf16): its fp16 ops' path

    @property
    def ops(self) -> list[Op]:
        """Every op in execution order, one per kernel launch."""
        return [op for seg in self.segments for op in seg.expand()]

    def _sum(self, f) -> float:
        return sum(seg.count * sum(f(op) for op in seg.ops) for seg in self.segments)

    @property
    def kernel_launches(self) -> int:
        return int(self._sum(lambda op: 1))

    @property
    def flops(self) -> float:
        return self._sum(lambda op: op.total_flops)

    @property
    def dram_bytes(self) -> float:
        return self._sum(lambda op: op.dram_bytes)

    @property
    def weight_bytes(self) -> float:
        return self._sum(lambda op: op.weight_bytes)

    def unique_ops(self) -> list[tuple[Op, int]]:
        """(op, how many times it runs): the compact form the cost model evaluates."""
        return [(op, seg.count) for seg in self.segments for op in seg.ops]


def merge(a: Op, b: Op) -> Op:
    """Op `b` run as the epilogue of `a`: b's input from a stays on chip (no write, no read)."""
    if b.flops and a.flops and (a.dtype, a.act_dtype) != (b.dtype, b.act_dtype):
        raise ValueError(f"cannot fuse {b.name} ({b.dtype}) into {a.name} ({a.dtype})")
    if a.window and b.window and a.window != b.window:
        raise ValueError(f"cannot fuse {b.name} (window {b.window}) into {a.name} ({a.window})")
    saved = b.reads_prev_bytes
    first = a if a.flops or not b.flops else b  # the op whose matrix work the kernel does
    return Op(
        name=a.name,
        kind=FUSED_KIND.get(a.kind, a.kind),
        layer=a.layer,
        dtype=first.dtype,
        act_dtype=first.act_dtype,
        flops=a.flops + b.flops,
        vector_flops=a.vector_flops + b.vector_flops,
        weight_bytes=a.weight_bytes + b.weight_bytes,
        act_in_bytes=a.act_in_bytes + b.act_in_bytes - saved,
        act_out_bytes=a.act_out_bytes + b.act_out_bytes - saved,
        kv_read_bytes=a.kv_read_bytes + b.kv_read_bytes,
        kv_write_bytes=a.kv_write_bytes + b.kv_write_bytes,
        # The fused kernel blocks like its first op: epilogues have no block of their own, and
        # flash attention streams K/V past the Q block without ever holding the score matrix.
        tile_bytes=a.tile_bytes,
        reads_prev_bytes=a.reads_prev_bytes,
        fused=a.fused + (b.name,) + b.fused,
        m=a.m,
        n=a.n,
        k=a.k,
        op=a.op,
        window=max(a.window, b.window),
    )


def fuse(ops: list[Op] | tuple[Op, ...], cpu_ops: frozenset[str] = frozenset()) -> tuple[Op, ...]:
    """The fusion pass: fold each epilogue op into the op before it. Ops whose type is in
    `cpu_ops` (run on the CPU, not the NPU) neither fold nor take an epilogue."""
    out: list[Op] = []
    for op in ops:
        if (
            out
            and op.kind in EPILOGUE_KINDS
            and op.reads_prev_bytes > 0
            and op.op_type not in cpu_ops
            and out[-1].op_type not in cpu_ops
            and not (
                op.flops
                and out[-1].flops
                and (op.dtype, op.act_dtype) != (out[-1].dtype, out[-1].act_dtype)
            )
        ):
            out[-1] = merge(out[-1], op)
        else:
            out.append(op)
    return tuple(out)
