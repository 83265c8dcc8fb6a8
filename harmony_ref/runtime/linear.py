"""A Linear layer whose weight is stored in a quantization format: y = x @ W.T + b.

    lin = QuantLinear("encoder.layer.0.attention.self.query", fmt, stored, bias)
    y = lin(x)                        # x (M, K) float32 -> (M, N) float32

`stored` is the real storage of `fmt` (kernels/formats.py): an (N, K) float32 or float16 array, an
Int8Tensor or an Int4Tensor. How it multiplies (`backend`):
- "kernels" (and "auto", the same): the format's kernel, as a runtime would run it. For int8/int4
  that is matmul_w8 / matmul_w4, which also quantize the activations to int8 per 32-block
  (llama.cpp's Q8 recipe), so a measured accuracy drop is weights + activations; fp32/fp16 run as
  a float32 NumPy matmul.
- "dequant": the weight dequantized once and multiplied in float32 (the weight-only error).
The kernel's operand (prepare_w4's row-interleaved layout, or the float32 copy) is built on the
first call and kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harmony_ref.kernels.formats import format_of
from harmony_ref.quant.policy import WeightFormat

LINEAR_BACKENDS = ("auto", "kernels", "dequant")


@dataclass(eq=False)
class QuantLinear:
    name: str
    fmt: WeightFormat
    stored: object
    bias: np.ndarray  # (N,) float32
    backend: str = "auto"
    _operand: object = None  # what the matmul reads, built on the first call

    def __post_init__(self):
        if self.backend not in LINEAR_BACKENDS:
            raise ValueError(f"{self.name}: backend must be one of {LINEAR_BACKENDS}, "
                             f"got {self.backend!r}")

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.stored.shape)

    @property
    def nbytes(self) -> int:
        return int(self.stored.nbytes)

    def __call__(self, x: np.ndarray) -> np.ndarray:  # x: (M, K) float32 -> (M, N)
        f = format_of(self.fmt)
        if self.backend == "dequant" and f.quantized:
            if self._operand is None:
                self._operand = f.dequantize(self.stored)
            return x @ self._operand.T + self.bias
        if self._operand is None:
            self._operand = f.prepare(self.stored)
        return f.matmul(x, self._operand) + self.bias
