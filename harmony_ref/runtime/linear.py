"""The one Linear layer of every model the runtime runs (MiniLM's encoder, the decoders): a weight
stored in a quantization format, y = x @ W.T (+ b).

    lin = QuantLinear("encoder.layer.0.attention.self.query", fmt, stored, bias)
    y = lin(x)                        # x (M, K) float32 -> (M, N) float32

`stored` is the real storage of `fmt` (kernels/formats.py): an (N, K) float32 or float16 array, an
Int8Tensor, an Int4Tensor, a GGMLTensor or KQuantTensor (or a W8A8Weight, below). How it
multiplies (`backend`):
- "kernels" (and "auto", the same): the format table's kernel, as a runtime would run it. For
  int8/int4 that is matmul_w8 / matmul_w4, which also quantize the activations to int8 per
  32-block (llama.cpp's Q8 recipe), so a measured accuracy drop is weights + activations; fp32 /
  fp16 run as a float32 NumPy matmul.
- "dequant": the weight dequantized once and multiplied in float32 (the weight-only error).
The kernel's operand (prepare_w4's row-interleaved layout, or a float32 W.T view) is built on the
first call and kept, unless the caller gives it (the decoder prepares every Linear at load, so no
layout work lands inside a timed step). With it the Linear binds its call once: the format's
`bind` (the GGUF types' compiled kernel, looked up once, kernels/formats.py) where the table's
kernel runs, else `matmul` with the operand.

`matmul` overrides the table's kernel where the decoder runs a format another way: W8A8 with static
activation scales (kernels/matmul_w8a8.py, `stored` a W8A8Weight) and fp16 widened a bounded chunk
of rows per call instead of keeping a float32 copy (make_linear below).

The decoder's Linears (runtime/llama.py) are built here from finished weights: make_linear puts an
FP32 weight (or the stored tensor compression fitted, or the file's own) into its policy format,
and Fused runs q|k|v and gate|up as one matmul where the parts share a format.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from harmony_ref.kernels.formats import float_matmul, format_of, stored_in
from harmony_ref.kernels.matmul_ggml import Q4_TYPES, prepare_q4_rows
from harmony_ref.kernels.matmul_w8a8 import matmul_w8a8, quantize_w8a8
from harmony_ref.quant.ggml import QUANTIZERS as GGML_QUANTIZERS
from harmony_ref.quant.ggml import concat_rows as concat_ggml_rows
from harmony_ref.quant.int4 import Int4Tensor
from harmony_ref.quant.int8 import Int8Tensor
from harmony_ref.quant.policy import Policy, WeightFormat, format_for_rows, parse_format

LINEAR_BACKENDS = ("auto", "kernels", "dequant")


@dataclass(eq=False)
class QuantLinear:
    name: str
    fmt: WeightFormat
    stored: object
    bias: np.ndarray | None = None  # (N,) float32
    backend: str = "auto"
    matmul: Callable | None = None  # (x, operand) -> (M, N); None: the format table's kernel
    operand: object = None  # what `matmul` reads; built on the first call when None
    _run: Callable | None = field(default=None, init=False, repr=False)  # x -> x @ W.T (bound)

    def __post_init__(self):
        if self.backend not in LINEAR_BACKENDS:
            raise ValueError(
                f"{self.name}: backend must be one of {LINEAR_BACKENDS}, got {self.backend!r}"
            )
        f = format_of(self.fmt)
        if self.backend == "dequant" and f.quantized:
            if self.matmul is not None:
                raise ValueError(f"{self.name}: backend 'dequant' runs its own float32 matmul")
            self.matmul = float_matmul
        elif self.matmul is None:
            self.matmul = f.matmul

    def __setattr__(self, name, value):
        # A new operand or kernel unbinds the call bound to the old one (`_bind` binds again).
        if name in ("operand", "matmul"):
            object.__setattr__(self, "_run", None)
        object.__setattr__(self, name, value)

    def prepare(self):
        """Build (once) and return the operand `matmul` reads."""
        if self.operand is None:
            f = format_of(self.fmt)
            if self.backend == "dequant" and f.quantized:
                self.operand = f.dequantize(self.stored).T
            else:
                self.operand = f.prepare(self.stored)
        return self.operand

    def _bind(self) -> Callable:
        """The per-call x -> x @ W.T: the format's bound kernel where `matmul` is the table's."""
        op, f = self.prepare(), format_of(self.fmt)
        run = f.bind(op) if f.bind is not None and self.matmul is f.matmul else None
        matmul = self.matmul
        self._run = run if run is not None else (lambda x: matmul(x, op))
        return self._run

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.stored.shape)

    @property
    def nbytes(self) -> int:
        return int(self.stored.nbytes)

    def __call__(self, x: np.ndarray) -> np.ndarray:  # x: (M, K) float32 -> (M, N)
        y = (self._run or self._bind())(x)
        return y if self.bias is None else y + self.bias


# ----------------------------------------------------------------------------------------------
# The decoder's Linears (runtime/llama.py): a weight quantized or cast into its policy format and
# its kernel operand prepared at load; q|k|v and gate|up fused into one matmul where they can be


def _prepared(name: str, fmt: WeightFormat, stored, matmul=None, operand=None) -> QuantLinear:
    """A QuantLinear with its kernel operand built now (at load, not inside a timed step)."""
    lin = QuantLinear(name, fmt, stored, matmul=matmul, operand=operand)
    lin._bind()
    return lin


def _stored_in(stored, fmt: WeightFormat):
    """`stored` (a matrix as the checkpoint file holds it) when it is in `fmt`, else None."""
    return stored if stored_in(stored, fmt) else None


def make_linear(
    name: str, w: np.ndarray, fmt: WeightFormat, act_scale=None, stored=None
) -> QuantLinear:
    """Quantize (or cast) an FP32 (N, K) weight into `fmt` and prepare its kernel layout; an
    int8 weight with a static activation scale (K,) runs W8A8 (kernels/matmul_w8a8.py).
    `stored`: the weight already in a stored form. An int4 / int8 tensor fitted on calibration
    data (GPTQ) is used instead of quantizing `w`; the weight as the checkpoint file stores it
    (DecoderWeights.stored) is used as it is when it is already in `fmt`, never requantized (the
    `as-stored` policy). A format with a `matmul_stored` kernel (fp16) runs it on the stored
    matrix, with no widened copy kept."""
    fmt = format_for_rows(fmt, w.shape[1])
    if isinstance(stored, (Int4Tensor, Int8Tensor)):
        if act_scale is not None:
            raise ValueError(f"{name}: a GPTQ-fitted weight cannot also run W8A8")
        return _prepared(name, fmt, stored)
    if act_scale is not None and fmt.facts.w8a8:
        t = quantize_w8a8(w, act_scale)
        return _prepared(name, fmt, t, matmul_w8a8, t)
    f = format_of(fmt)
    t = _stored_in(stored, fmt) if act_scale is None else None
    t = t if t is not None else f.quantize(w, fmt.group_size)
    if f.matmul_stored is not None:
        return _prepared(name, fmt, t, f.matmul_stored, t)
    return _prepared(name, fmt, t)


def quantize_stored(w: np.ndarray, fmt: WeightFormat):
    """Round-to-nearest storage of an FP32 (N, K) weight in int4 / int8 (as make_linear)."""
    fmt = format_for_rows(fmt, w.shape[1])
    return format_of(fmt).quantize(w, fmt.group_size)


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


def _fitted(given) -> list:
    """Each stored tensor that calibration fitted (GPTQ: an Int4Tensor / Int8Tensor), else None."""
    return [t if isinstance(t, (Int4Tensor, Int8Tensor)) else None for t in given]


def _fused_run(name: str, parts, fmt: WeightFormat, scale, given) -> QuantLinear:
    """One Linear for parts (name, (N_i, K) weight) of one format over one input, rows
    concatenated: parts fitted on calibration data (GPTQ) keep their stored rows and the rest
    are rounded; parts the file stores in `fmt` keep their stored rows when all of them do."""
    w = parts[0][1] if len(parts) == 1 else np.concatenate([a for _, a in parts], axis=0)
    fitted = _fitted(given)
    if any(t is not None for t in fitted):
        ts = [t if t is not None else quantize_stored(a, fmt) for (_, a), t in zip(parts, fitted)]
        return make_linear(name, w, fmt, scale, concat_rows(ts))
    kept = [_stored_in(t, fmt) for t in given]
    fused = None
    if all(t is not None for t in kept):  # rows concatenate exactly, as stored
        if len(kept) == 1:
            fused = kept[0]
        elif fmt.facts.ggml:  # GGUF's blocks: GGMLTensor or KQuantTensor
            fused = concat_ggml_rows(kept)
        else:
            fused = np.concatenate(kept, axis=0)
    return make_linear(name, w, fmt, scale, fused)


class Fused:
    """Several Linears over one input, outputs concatenated along N: one matmul for each run of
    consecutive parts that share a format (weights concatenated row-wise before quantizing, or
    the stored rows concatenated as they are), so q|k|v with v in another format (llama.cpp's
    Q4_K_M gives attn_v more bits) is two calls, q|k and v, not three. Q4_0 and Q4_1 parts of a
    mixed GGUF plan run as one matmul."""

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
        if (
            len(parts) > 1
            and any(f != fmts[0] for f in fmts)
            and all(f.kind in Q4_TYPES for f in fmts)
            and all(s is None for s in scales)
            and not any(t is not None for t in _fitted(given))
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
            runs, lo = [], 0
            for i in range(1, len(parts) + 1):
                if i == len(parts) or fmts[i] != fmts[lo]:
                    runs.append(range(lo, i))
                    lo = i
            self.linears = [
                _fused_run(
                    name if len(r) > 1 else parts[r[0]][0],
                    [parts[i] for i in r],
                    fmts[r[0]],
                    scales[r[0]],
                    [given[i] for i in r],
                )
                for r in runs
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
