"""Every weight format, declared once: how a float (N, K) matrix is stored in it, read back, and
multiplied (ggml's type-traits table). Everything that turns a WeightFormat into code, the MiniLM
forward, the host op graph, the calibration microbenchmarks, the job's host part, the cold start
measurement, artifacts, looks the format up here; nothing else dispatches on a format's kind.

    f = format_of(parse_format("int4-g32"))        # or FORMATS["int4"]
    stored = f.quantize(w, 32)                     # (N, K) float -> Int4Tensor (Numba)
    f.quantize_ref(w, 32)                          # the same bits, plain NumPy
    f.dequantize(stored)                           # -> (N, K) float32
    y = f.matmul(x, f.prepare(stored))             # x (M, K) or (K,) -> (M, N) float32: the kernel
    f.matmul_ref(x, stored)                        # what the kernel computes, plain NumPy
    f.nbytes(n, k, 32)                             # stored bytes, scales and zero points included

Formats (keys of FORMATS):
    fp32      float32 (N, K); the "kernel" is NumPy's float32 matmul (OpenBLAS), x @ W.T
    fp16      float16 (N, K), widened to float32 once (this CPU has no fast fp16 path)
    int8      Int8Tensor, per-row scale: matmul_w8 (int8 activations per 32-block)
    int4      Int4Tensor asym, per-group scale + zero point: matmul_w4
    int4-sym  Int4Tensor sym, per-group scale: matmul_w4
    q4_0      GGMLTensor, GGUF's bytes: matmul_w4 on the repacked nibbles (kernels/matmul_ggml.py)
    q4_1      GGMLTensor: matmul_w4 + a per-block constant term (a Numba loop, 1/32 of the work)
    q8_0      GGMLTensor: matmul_kquant (int8 activations per 32-block, vpdpbusd group dots)
    q5_0 q4_k q5_k q6_k   KQuantTensor, GGUF's bytes (quant/kquants.py; NumPy quantizers, so
              `quantize` is the `_ref`): matmul_kquant, int8 activations (Q8_K) and integer
              group dots (kernels/matmul_kquant.py)
GGUF's F16 is fp16 (the same IEEE half, rounded to nearest even); "f16" parses to it.
`prepare` builds the kernel's operand once per tensor (the row-interleaved layout of
prepare_w4/prepare_w8, cached on the tensor; for floats a float32 W.T view). `arrays` /
`from_arrays` name a stored matrix's arrays (`.packed`, `.scale`, `.zero_point`, `.values` after
the weight's name), which is how artifacts lay them out. tests/kernels/test_formats.py walks this
table: round trip, fast vs `_ref`, quantized dot vs float dot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from harmony_ref.kernels.matmul import (
    matmul_w4,
    matmul_w4_ref,
    matmul_w8,
    matmul_w8_ref,
    prepare_w4,
    prepare_w8,
)
from harmony_ref.kernels.matmul_ggml import matmul_ggml, matmul_ggml_ref, prepare_ggml
from harmony_ref.kernels.matmul_kquant import matmul_kquant, matmul_kquant_ref, prepare_kquant
from harmony_ref.quant.ggml import QUANTIZERS, QUANTIZERS_REF, GGMLTensor, dequantize_ggml
from harmony_ref.quant.int4 import Int4Tensor, dequantize_int4, quantize_int4, quantize_int4_ref
from harmony_ref.quant.int8 import Int8Tensor, dequantize_int8, quantize_int8, quantize_int8_ref
from harmony_ref.quant.kquants import (
    KQUANT_TYPES,
    KQuantTensor,
    dequantize_kquant,
    quantize_kquant_ref,
)
from harmony_ref.quant.policy import WeightFormat, parse_format


@dataclass(frozen=True)
class Format:
    name: str
    kind: str  # WeightFormat.kind: fp32 | fp16 | int8 | int4 | q4_0 | q4_1 | q8_0 | q5_0 | q4_k ...
    quantize: Callable  # (w (N, K) float, group_size) -> stored; the fast path where there is one
    quantize_ref: Callable  # the same, plain NumPy (bit-identical)
    dequantize: Callable  # stored -> (N, K) float32
    prepare: Callable  # stored -> the kernel's operand (built once per tensor)
    matmul: Callable  # (x (M, K) or (K,), operand) -> (M, N) or (N,) float32
    matmul_ref: Callable  # (x, stored) -> what `matmul` computes, plain NumPy
    kernel: str  # what runs the matmul, as provenance names it
    nbytes: Callable  # (n, k, group_size) -> stored bytes of an (n, k) matrix
    arrays: Callable  # stored -> {suffix after the weight's name: array}
    from_arrays: Callable  # ({suffix: array}, shape, group_size) -> stored

    @property
    def quantized(self) -> bool:
        return self.kind not in ("fp32", "fp16")


def _float_matmul(x, operand):
    return x @ operand


def _float_matmul_ref(x, stored):
    x = np.asarray(x, dtype=np.float64)
    return (x @ np.asarray(stored, dtype=np.float64).T).astype(np.float32)


def _float_format(name: str, dtype) -> Format:
    def quantize(w, group_size=None):
        return np.ascontiguousarray(w, dtype=dtype)

    return Format(
        name=name,
        kind=name,
        quantize=quantize,
        quantize_ref=quantize,
        dequantize=lambda s: np.asarray(s, dtype=np.float32),
        # (K, N) view of a C-contiguous float32 copy: x @ W.T without materialising W.T
        prepare=lambda s: np.ascontiguousarray(s, dtype=np.float32).T,
        matmul=_float_matmul,
        matmul_ref=_float_matmul_ref,
        kernel="numpy float32 matmul",
        nbytes=lambda n, k, group_size=None: WeightFormat(name).nbytes(n, k),
        arrays=lambda s: {"": s},
        from_arrays=lambda a, shape, group_size=None: a[""],
    )


def _int4_format(scheme: str) -> Format:
    def from_arrays(a, shape, group_size):
        return Int4Tensor(
            a[".packed"], a[".scale"], a.get(".zero_point"), tuple(shape), int(group_size), scheme
        )

    def arrays(t):
        out = {".packed": t.packed, ".scale": t.scale}
        if t.zero_point is not None:
            out[".zero_point"] = t.zero_point
        return out

    return Format(
        name="int4" if scheme == "asym" else "int4-sym",
        kind="int4",
        quantize=lambda w, group_size: quantize_int4(w, group_size, scheme),
        quantize_ref=lambda w, group_size: quantize_int4_ref(w, group_size, scheme),
        dequantize=dequantize_int4,
        prepare=prepare_w4,
        matmul=matmul_w4,
        matmul_ref=matmul_w4_ref,
        kernel="numba matmul_w4",
        nbytes=lambda n, k, group_size: WeightFormat("int4", group_size, scheme).nbytes(n, k),
        arrays=arrays,
        from_arrays=from_arrays,
    )


GGML_KERNELS = {
    "q4_0": "numba matmul_w4 (q4_0 repacked as int4-g32-sym)",
    "q4_1": "numba matmul_w4 + block-constant BLAS (q4_1)",
    "q8_0": "numba matmul_kquant (q8_0 x int8 32-blocks, integer group dots)",
}


def _ggml_format(qtype: str) -> Format:
    return Format(
        name=qtype,
        kind=qtype,
        quantize=lambda w, group_size=None: QUANTIZERS[qtype](w),
        quantize_ref=lambda w, group_size=None: QUANTIZERS_REF[qtype](w),
        dequantize=dequantize_ggml,
        prepare=prepare_ggml,
        matmul=matmul_ggml,
        matmul_ref=matmul_ggml_ref,
        kernel=GGML_KERNELS[qtype],
        nbytes=lambda n, k, group_size=None: WeightFormat(qtype).nbytes(n, k),
        arrays=lambda t: {".blocks": t.data},
        from_arrays=lambda a, shape, group_size=None: GGMLTensor(qtype, a[".blocks"], tuple(shape)),
    )


def _kquant_format(qtype: str) -> Format:
    return Format(
        name=qtype,
        kind=qtype,
        quantize=lambda w, group_size=None: quantize_kquant_ref(w, qtype),
        quantize_ref=lambda w, group_size=None: quantize_kquant_ref(w, qtype),
        dequantize=dequantize_kquant,
        prepare=prepare_kquant,
        matmul=matmul_kquant,
        matmul_ref=matmul_kquant_ref,
        kernel=f"numba matmul_kquant ({qtype} x q8_k int8 group dots)",
        nbytes=lambda n, k, group_size=None: WeightFormat(qtype).nbytes(n, k),
        arrays=lambda t: {".blocks": t.data},
        from_arrays=lambda a, shape, group_size=None: KQuantTensor(
            qtype, a[".blocks"], tuple(shape)
        ),
    )


FORMATS: dict[str, Format] = {
    f.name: f
    for f in [
        _float_format("fp32", np.float32),
        _float_format("fp16", np.float16),
        Format(
            name="int8",
            kind="int8",
            quantize=lambda w, group_size=None: quantize_int8(w),
            quantize_ref=lambda w, group_size=None: quantize_int8_ref(w),
            dequantize=dequantize_int8,
            prepare=prepare_w8,
            matmul=matmul_w8,
            matmul_ref=matmul_w8_ref,
            kernel="numba matmul_w8",
            nbytes=lambda n, k, group_size=None: WeightFormat("int8").nbytes(n, k),
            arrays=lambda t: {".values": t.values, ".scale": t.scale},
            from_arrays=lambda a, shape, group_size=None: Int8Tensor(
                a[".values"], a[".scale"], tuple(shape)
            ),
        ),
        _int4_format("asym"),
        _int4_format("sym"),
        _ggml_format("q4_0"),
        _ggml_format("q4_1"),
        _ggml_format("q8_0"),
        *(_kquant_format(qtype) for qtype in KQUANT_TYPES),
    ]
}


def format_of(fmt: WeightFormat) -> Format:
    """The table entry of a WeightFormat (its group size is the caller's to pass on)."""
    if fmt.kind == "int4":
        return FORMATS["int4" if fmt.scheme == "asym" else "int4-sym"]
    return FORMATS[fmt.kind]


def quantize(w, fmt: WeightFormat):
    """(N, K) float -> the stored form of `fmt` (fast path)."""
    return format_of(fmt).quantize(w, fmt.group_size)


def stored_format(stored) -> WeightFormat:
    """The WeightFormat a stored matrix is in."""
    if isinstance(stored, Int4Tensor):
        sym = "-sym" if stored.scheme == "sym" else ""
        return parse_format(f"int4-g{stored.group_size}{sym}")
    if isinstance(stored, Int8Tensor):
        return parse_format("int8")
    if isinstance(stored, (GGMLTensor, KQuantTensor)):
        return parse_format(stored.qtype)
    if isinstance(stored, np.ndarray) and stored.dtype in (np.float16, np.float32):
        return parse_format("fp16" if stored.dtype == np.float16 else "fp32")
    raise ValueError(
        f"not a stored weight matrix: {type(stored).__name__} {getattr(stored, 'dtype', '')}"
    )
