"""The one Linear layer of every model the runtime runs (MiniLM's encoder, the decoders): a weight
stored in a quantization format, y = x @ W.T (+ b).

    lin = QuantLinear("encoder.layer.0.attention.self.query", fmt, stored, bias)
    y = lin(x)                        # x (M, K) float32 -> (M, N) float32

`stored` is the real storage of `fmt` (kernels/formats.py): an (N, K) float32 or float16 array, an
Int8Tensor, an Int4Tensor, a GGMLTensor (or a W8A8Weight, below). How it multiplies (`backend`):
- "kernels" (and "auto", the same): the format table's kernel, as a runtime would run it. For
  int8/int4 that is matmul_w8 / matmul_w4, which also quantize the activations to int8 per
  32-block (llama.cpp's Q8 recipe), so a measured accuracy drop is weights + activations; fp32 /
  fp16 run as a float32 NumPy matmul.
- "dequant": the weight dequantized once and multiplied in float32 (the weight-only error).
The kernel's operand (prepare_w4's row-interleaved layout, or a float32 W.T view) is built on the
first call and kept, unless the caller gives it (the decoder prepares every Linear at load, so no
layout work lands inside a timed step).

`matmul` overrides the table's kernel where the decoder runs a format another way: W8A8 with static
activation scales (kernels/matmul_w8a8.py, `stored` a W8A8Weight) and fp16 widened a bounded chunk
of rows per call instead of keeping a float32 copy (runtime/llama.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from harmony_ref.kernels.formats import float_matmul, format_of
from harmony_ref.quant.policy import WeightFormat

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

    def prepare(self):
        """Build (once) and return the operand `matmul` reads."""
        if self.operand is None:
            f = format_of(self.fmt)
            if self.backend == "dequant" and f.quantized:
                self.operand = f.dequantize(self.stored).T
            else:
                self.operand = f.prepare(self.stored)
        return self.operand

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.stored.shape)

    @property
    def nbytes(self) -> int:
        return int(self.stored.nbytes)

    def __call__(self, x: np.ndarray) -> np.ndarray:  # x: (M, K) float32 -> (M, N)
        y = self.matmul(x, self.operand if self.operand is not None else self.prepare())
        return y if self.bias is None else y + self.bias
