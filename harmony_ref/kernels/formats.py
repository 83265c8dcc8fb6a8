"""Every weight format, declared once: how a float (N, K) matrix is stored in it, read back, and
multiplied (ggml's type-traits table, the code half: each entry extends the format's facts,
quant/formats.py, with its quantizers and kernels). Everything that turns a WeightFormat into
code, the decoder and MiniLM forwards, the host op graph, the calibration microbenchmarks, the
job's host part, the cold start measurement, artifacts, GGUF export, looks the format up here;
nothing else dispatches on a format's kind. Adding a format is one entry in quant/formats.py's
FACTS, one here, and its kernels.

    f = format_of(parse_format("int4-g32"))        # or FORMATS["int4"]
    stored = f.quantize(w, 32)                     # (N, K) float -> Int4Tensor (Numba)
    f.quantize_ref(w, 32)                          # the same bits, plain NumPy
    f.dequantize(stored)                           # -> (N, K) float32
    y = f.matmul(x, f.prepare(stored))             # x (M, K) or (K,) -> (M, N) float32: the kernel
    f.matmul_ref(x, stored)                        # what the kernel computes, plain NumPy
    f.nbytes(n, k, 32)                             # stored bytes, scales and zero points included
    f.facts.bits, f.facts.gguf_type, ...           # every fact of quant/formats.py FACTS

Formats (keys of FORMATS):
    fp32      float32 (N, K); the "kernel" is NumPy's float32 matmul (OpenBLAS), x @ W.T
    fp16      float16 (N, K), widened to float32 once (this CPU has no fast fp16 path)
    int8      Int8Tensor, per-row scale: matmul_w8 (int8 activations per 32-block)
    int4      Int4Tensor asym, per-group scale + zero point: matmul_w4
    int4-sym  Int4Tensor sym, per-group scale: matmul_w4
    q4_0      GGMLTensor, GGUF's bytes: matmul_w4 on the repacked nibbles (kernels/matmul_ggml.py)
    q4_1      GGMLTensor: matmul_kquant's 32-block kernel (the file's nibbles, d and m; d u xq +
              m xsum per block, int8 activations per 32-block)
    q8_0      GGMLTensor: matmul_kquant's 32-block kernel (int8 activations per 32-block,
              vpdpbusd block dots)
    q5_0 q4_k q5_k q6_k   KQuantTensor, GGUF's bytes (quant/kquants.py; NumPy quantizers, so
              `quantize` is the `_ref`): matmul_kquant, int8 activations (Q8_K) and integer
              group dots (kernels/matmul_kquant.py)
GGUF's F16 is fp16 (the same IEEE half, rounded to nearest even); "f16" parses to it.
`prepare` builds the kernel's operand once per tensor (the row-interleaved layout of
prepare_w4/prepare_w8, cached on the tensor; for floats a float32 W.T view). `arrays` /
`from_arrays` name a stored matrix's arrays (`.packed`, `.scale`, `.zero_point`, `.values` after
the weight's name), which is how artifacts lay them out. `matmul_stored`, where a format has one,
multiplies the stored matrix as it is, with no operand built (fp16: widened a bounded chunk of rows
per call, so a large weight never has a float32 copy; the decoder runs its fp16 Linears so).
`bind`, where a format has one, turns an operand into a one-argument x -> `matmul(x, operand)`
with the kernel's compiled specialization found once (the GGUF types: bind_kquant), which is what
a Linear calls per token.
tests/kernels/test_formats.py walks this table: round trip, fast vs `_ref`, quantized dot vs float
dot; tests/quant/test_formats.py holds the facts complete and consistent.
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
from harmony_ref.kernels.matmul_kquant import (
    bind_kquant,
    matmul_kquant,
    matmul_kquant_ref,
    prepare_kquant,
)
from harmony_ref.quant._checks import check_cast_range
from harmony_ref.quant.formats import FACTS, FormatFacts
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

F16_CHUNK_ROWS = 4096  # fp16's matmul_stored widens this many weight rows at a time


@dataclass(frozen=True)
class Format:
    facts: FormatFacts  # bits, scale layout, GGUF type, ... (quant/formats.py)
    quantize: Callable  # (w (N, K) float, group_size) -> stored; the fast path where there is one
    quantize_ref: Callable  # the same, plain NumPy (bit-identical)
    dequantize: Callable  # stored -> (N, K) float32
    prepare: Callable  # stored -> the kernel's operand (built once per tensor)
    matmul: Callable  # (x (M, K) or (K,), operand) -> (M, N) or (N,) float32
    matmul_ref: Callable  # (x, stored) -> what `matmul` computes, plain NumPy
    kernel: str  # what runs the matmul, as provenance names it
    arrays: Callable  # stored -> {suffix after the weight's name: array}
    from_arrays: Callable  # ({suffix: array}, shape, group_size) -> stored
    matmul_stored: Callable | None = None  # (x, stored) -> y with no operand built (see above)
    bind: Callable | None = None  # operand -> (x -> matmul(x, operand)) or None (see above)

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def kind(self) -> str:
        return self.facts.kind

    @property
    def quantized(self) -> bool:
        return self.facts.quantized

    def nbytes(self, n: int, k: int, group_size: int | None = None) -> int:
        """Stored bytes of an (n, k) matrix, scales and zero points included."""
        return self.facts.nbytes(n, k, group_size)


def float_matmul(x, operand):
    # operand: (K, N) view of W.T (BLAS reads it transposed, no copy); x as float32 (a no-op for
    # float32), so that float64 or float16 activations give float32 out as every format does
    return np.asarray(x, dtype=np.float32) @ operand


def _float_matmul_ref(x, stored):
    x = np.asarray(x, dtype=np.float64)
    return (x @ np.asarray(stored, dtype=np.float64).T).astype(np.float32)


def matmul_f16_chunked(x, w16):
    """x (M, K) or (K,) float @ W.T for float16 W (N, K), widened F16_CHUNK_ROWS rows at a time
    -> (M, N) or (N,) float32, as `float_matmul`."""
    n = w16.shape[0]
    x = np.asarray(x, dtype=np.float32)
    rows = x[None] if x.ndim == 1 else x  # a vector: one row (else its K went to the out rows)
    out = np.empty((rows.shape[0], n), dtype=np.float32)
    for n0 in range(0, n, F16_CHUNK_ROWS):
        out[:, n0 : n0 + F16_CHUNK_ROWS] = rows @ w16[n0 : n0 + F16_CHUNK_ROWS].astype(np.float32).T
    return out[0] if x.ndim == 1 else out


def _float_format(name: str, matmul_stored=None) -> Format:
    facts = FACTS[name]

    def quantize(w, group_size=None):
        w = np.asarray(w)
        with np.errstate(over="ignore"):
            stored = np.ascontiguousarray(w, dtype=facts.dtype)
        check_cast_range(w, stored, "w")  # a finite weight is never stored as inf
        return stored

    return Format(
        facts=facts,
        quantize=quantize,
        quantize_ref=quantize,
        dequantize=lambda s: np.asarray(s, dtype=np.float32),
        # (K, N) view of a C-contiguous float32 copy: x @ W.T without materialising W.T
        prepare=lambda s: np.ascontiguousarray(s, dtype=np.float32).T,
        matmul=float_matmul,
        matmul_ref=_float_matmul_ref,
        kernel="numpy float32 matmul",
        arrays=lambda s: {"": s},
        from_arrays=lambda a, shape, group_size=None: a[""],
        matmul_stored=matmul_stored,
    )


def _int4_format(name: str) -> Format:
    scheme = FACTS[name].scheme
    assert scheme is not None, name  # every int4 entry of the facts table names its scheme

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
        facts=FACTS[name],
        quantize=lambda w, group_size: quantize_int4(w, group_size, scheme),
        quantize_ref=lambda w, group_size: quantize_int4_ref(w, group_size, scheme),
        dequantize=dequantize_int4,
        prepare=prepare_w4,
        matmul=matmul_w4,
        matmul_ref=matmul_w4_ref,
        kernel="numba matmul_w4",
        arrays=arrays,
        from_arrays=from_arrays,
    )


GGML_KERNELS = {
    "q4_0": "numba matmul_w4 (q4_0 repacked as int4-g32-sym)",
    "q4_1": "numba matmul_kquant (q4_1 x int8 32-blocks, integer block dots)",
    "q8_0": "numba matmul_kquant (q8_0 x int8 32-blocks, integer group dots)",
}


def _ggml_format(qtype: str) -> Format:
    return Format(
        facts=FACTS[qtype],
        quantize=lambda w, group_size=None: QUANTIZERS[qtype](w),
        quantize_ref=lambda w, group_size=None: QUANTIZERS_REF[qtype](w),
        dequantize=dequantize_ggml,
        prepare=prepare_ggml,
        matmul=matmul_ggml,
        matmul_ref=matmul_ggml_ref,
        kernel=GGML_KERNELS[qtype],
        bind=bind_kquant,  # q4_1 / q8_0: a PreparedKQuant (q4_0's operand: None)
        arrays=lambda t: {".blocks": t.data},
        from_arrays=lambda a, shape, group_size=None: GGMLTensor(qtype, a[".blocks"], tuple(shape)),
    )


def _kquant_format(qtype: str) -> Format:
    return Format(
        facts=FACTS[qtype],
        quantize=lambda w, group_size=None: quantize_kquant_ref(w, qtype),
        quantize_ref=lambda w, group_size=None: quantize_kquant_ref(w, qtype),
        dequantize=dequantize_kquant,
        prepare=prepare_kquant,
        matmul=matmul_kquant,
        matmul_ref=matmul_kquant_ref,
        bind=bind_kquant,
        kernel=f"numba matmul_kquant ({qtype} x q8_k int8 group dots)",
        arrays=lambda t: {".blocks": t.data},
        from_arrays=lambda a, shape, group_size=None: KQuantTensor(
            qtype, a[".blocks"], tuple(shape)
        ),
    )


FORMATS: dict[str, Format] = {
    f.name: f
    for f in [
        _float_format("fp32"),
        _float_format("fp16", matmul_stored=matmul_f16_chunked),
        Format(
            facts=FACTS["int8"],
            quantize=lambda w, group_size=None: quantize_int8(w),
            quantize_ref=lambda w, group_size=None: quantize_int8_ref(w),
            dequantize=dequantize_int8,
            prepare=prepare_w8,
            matmul=matmul_w8,
            matmul_ref=matmul_w8_ref,
            kernel="numba matmul_w8",
            arrays=lambda t: {".values": t.values, ".scale": t.scale},
            from_arrays=lambda a, shape, group_size=None: Int8Tensor(
                a[".values"], a[".scale"], tuple(shape)
            ),
        ),
        _int4_format("int4"),
        _int4_format("int4-sym"),
        _ggml_format("q4_0"),
        _ggml_format("q4_1"),
        _ggml_format("q8_0"),
        *(_kquant_format(qtype) for qtype in KQUANT_TYPES),
    ]
}


assert set(FORMATS) == set(FACTS), "every format of quant/formats.py FACTS has its code here"


def format_of(fmt: WeightFormat) -> Format:
    """The table entry of a WeightFormat (its group size is the caller's to pass on)."""
    return FORMATS[fmt.facts.name]


def quantize(w, fmt: WeightFormat):
    """(N, K) float -> the stored form of `fmt` (fast path)."""
    return format_of(fmt).quantize(w, fmt.group_size)


def stored_format(stored) -> WeightFormat:
    """The WeightFormat a stored matrix is in (a quantized tensor names its format; a float
    array is the format of its dtype)."""
    if isinstance(stored, (Int4Tensor, Int8Tensor, GGMLTensor, KQuantTensor)):
        return parse_format(stored.format_name)
    by_dtype = {np.dtype(f.dtype): f.name for f in FACTS.values() if f.dtype is not None}
    if isinstance(stored, np.ndarray) and stored.dtype in by_dtype:
        return parse_format(by_dtype[stored.dtype])
    raise ValueError(
        f"not a stored weight matrix: {type(stored).__name__} {getattr(stored, 'dtype', '')}"
    )


def stored_in(stored, fmt: WeightFormat) -> bool:
    """Whether `stored` is a stored matrix in `fmt` (False for anything else)."""
    try:
        return stored_format(stored) == fmt
    except ValueError:
        return False
