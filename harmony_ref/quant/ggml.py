"""GGUF's own block formats, Q4_0, Q4_1 and Q8_0, stored as the file stores them: one row of an
(N, K) matrix is K / 32 blocks of raw bytes, so a quantized tensor here is the bytes a GGUF
tensor holds, and llama.cpp reads what we wrote without converting anything.

Blocks (ggml's src/ggml-common.h; QK = 32 weights along K per block, sizes checked below):

    q4_0  18 bytes   d: float16 delta | qs: 16 bytes, byte j = u_j | u_{j+16} << 4, u in 0..15
                     w' = (u - 8) * d
    q4_1  20 bytes   d: float16 delta | m: float16 min | qs: as q4_0     w' = u * d + m
    q8_0  34 bytes   d: float16 delta | qs: 32 int8                      w' = q * d

Quantizers (ggml-quants.c's quantize_row_*_ref, float32 arithmetic in the same order, so the
bytes are those of llama.cpp's and of the `gguf` package's `gguf.quants.quantize`; the tests hold
all three equal bit for bit):

    q4_0  max = the block's value of largest |w| (the first one on ties); d = max / -8;
          id = 1 / d (0 when d = 0); u = min(15, trunc(w * id + 8.5))
    q4_1  d = (max - min) / 15; id = 1 / d (0 when d = 0); u = min(15, trunc((w - min) * id + 0.5))
    q8_0  d = max|w| / 127; id = 1 / d (0 when d = 0); q = roundf(w * id) (half away from zero)

q4_0's "first of equal |w|" is NumPy's argmax, as the `gguf` package has it. A stored float16
field that is zero may differ from ggml's C loop or from `gguf` in its sign only (-0.0: which of
+-0 a min/max reduction returns depends on its order, and NumPy's is the CPU's SIMD order); both
decode to the same weights, and we store q4_1's minimum as +0.0 whenever it is zero.
The float32 d is what the quantizer divides by; only the stored copy is rounded to float16
(round to nearest even, as ggml's FP32_TO_FP16). q4_0 maps the block's extreme to u = 0 (-8
steps) and its opposite end may clamp at +7 steps: ggml's choice, kept because the file must be
ggml's. `quantize_<fmt>_ref` is plain NumPy; `quantize_<fmt>` is the Numba version, held bit
identical to it by tests/quant/test_ggml.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from harmony_ref.quant._checks import as_float32_matrix

TINY_BLOCK_NOTE = """A block whose d is so small (|w| below about 1e-36) that 1 / d overflows
float32: ggml then multiplies by inf and casts inf / NaN to an integer, which C leaves undefined
(the `gguf` package's bytes there are whatever its CPU's cast gives). We store level 0 (q4_1:
its lowest level) instead; d rounds to 0 in float16 there anyway, so every such block decodes to
the same weights llama.cpp decodes from its own bytes (0, plus q4_1's minimum, also 0)."""
QK = 32  # weights per block along K (QK4_0 = QK4_1 = QK8_0)
HALF = QK // 2
# bytes per block: float16 fields + packed quants (ggml's static_asserts)
BLOCK_BYTES = {"q4_0": 2 + QK // 2, "q4_1": 2 + 2 + QK // 2, "q8_0": 2 + QK}
GGML_FORMATS = tuple(BLOCK_BYTES)
Q4_0_LEVEL_OFFSET = np.float32(8.5)  # -8 steps .. +7 steps, +0.5 so that trunc rounds
Q4_1_ROUND = np.float32(0.5)
NIBBLE_MAX = 15
Q8_0_MAX_LEVEL = 127

assert BLOCK_BYTES == {"q4_0": 18, "q4_1": 20, "q8_0": 34}


def check_block_bytes(t, qk: int, block_bytes: int) -> None:
    """ValueError unless t.data is the uint8 (N, K / qk * block_bytes) of a t.shape (N, K)."""
    n, k = t.shape
    if k % qk:
        raise ValueError(f"K = {k} (shape {t.shape}) is not a multiple of {qk}")
    want = (n, k // qk * block_bytes)
    if t.data.dtype != np.uint8 or t.data.shape != want:
        raise ValueError(
            f"{t.qtype} data must be uint8 of shape {want}, got {t.data.dtype} {t.data.shape}"
        )


@dataclass(frozen=True, eq=False)
class GGMLTensor:
    """A (N, K) matrix in a GGUF block format: `data` (N, K // 32 * block bytes) uint8 is the
    tensor's bytes in the file, row after row (a GGUF tensor of shape [K, N])."""

    qtype: str  # q4_0 | q4_1 | q8_0
    data: np.ndarray  # (N, K // QK * BLOCK_BYTES[qtype]) uint8
    shape: tuple[int, int]

    def __post_init__(self):
        if self.qtype not in BLOCK_BYTES:
            raise ValueError(f"qtype must be one of {GGML_FORMATS}, got {self.qtype!r}")
        check_block_bytes(self, QK, BLOCK_BYTES[self.qtype])

    @property
    def blocks(self) -> np.ndarray:
        """(N, K // 32, block bytes) uint8 view."""
        return self.data.reshape(self.shape[0], -1, BLOCK_BYTES[self.qtype])

    @property
    def d(self) -> np.ndarray:
        """(N, K // 32) float16 deltas."""
        return np.ascontiguousarray(self.blocks[:, :, 0:2]).view(np.float16)[:, :, 0]

    @property
    def m(self) -> np.ndarray:
        """(N, K // 32) float16 block minima (q4_1 only)."""
        if self.qtype != "q4_1":
            raise ValueError(f"{self.qtype} has no block minimum")
        return np.ascontiguousarray(self.blocks[:, :, 2:4]).view(np.float16)[:, :, 0]

    def levels(self) -> np.ndarray:
        """(N, K) int8: u (0..15) for q4_0 / q4_1, q (-127..127) for q8_0, in weight order."""
        n, k = self.shape
        b = self.blocks
        if self.qtype == "q8_0":
            return np.ascontiguousarray(b[:, :, 2:]).view(np.int8).reshape(n, k)
        qs = b[:, :, BLOCK_BYTES[self.qtype] - HALF :]  # (N, B, 16)
        u = np.concatenate([qs & 0x0F, qs >> 4], axis=2)  # weight j, then j + 16
        return u.astype(np.int8).reshape(n, k)

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.nbytes / (self.shape[0] * self.shape[1])

    @property
    def format_name(self) -> str:
        return self.qtype

    def rows(self, index) -> GGMLTensor:
        """The rows `index` (a permutation or a slice) as a new tensor: blocks never span rows,
        so reordering rows is exact (GGUF's Q/K row permutation)."""
        data = np.ascontiguousarray(self.data[index])
        return type(self)(self.qtype, data, (data.shape[0], self.shape[1]))


def concat_rows(tensors: list[GGMLTensor]) -> GGMLTensor:
    """Row-wise concatenation of tensors of one qtype and K (fused q|k|v, gate|up); the
    K-quants' KQuantTensor (quant/kquants.py) too."""
    qtypes = {t.qtype for t in tensors}
    ks = {t.shape[1] for t in tensors}
    if len(qtypes) != 1 or len(ks) != 1:
        raise ValueError(
            f"concat_rows needs one qtype and one K, got {sorted(qtypes)}, {sorted(ks)}"
        )
    data = np.concatenate([t.data for t in tensors], axis=0)
    return type(tensors[0])(tensors[0].qtype, data, (data.shape[0], ks.pop()))


def _check(w, qtype: str) -> np.ndarray:
    w = as_float32_matrix(w)
    if w.shape[1] % QK:
        raise ValueError(
            f"K = {w.shape[1]} (shape {w.shape}) is not a multiple of {QK}: "
            f"{qtype} stores blocks of {QK} weights along K"
        )
    return w


def _fp16_bytes(a: np.ndarray) -> np.ndarray:
    """(N, B) float32 -> (N, B, 2) uint8 of its float16 rounding (nearest even, as ggml)."""
    with np.errstate(over="ignore"):
        return a.astype(np.float16)[:, :, None].view(np.uint8)


def _pack_nibbles(u: np.ndarray) -> np.ndarray:
    """(N, B, 32) uint8 levels -> (N, B, 16): byte j = u_j | u_{j+16} << 4."""
    return u[:, :, :HALF] | (u[:, :, HALF:] << np.uint8(4))


def _assemble(qtype: str, n: int, k: int, *parts) -> GGMLTensor:
    data = np.concatenate(parts, axis=2).reshape(n, k // QK * BLOCK_BYTES[qtype])
    return GGMLTensor(qtype, np.ascontiguousarray(data), (n, k))


def _safe_inverse(d: np.ndarray) -> np.ndarray:
    """1 / d, and 0 where d = 0 or where 1 / d overflows (see TINY_BLOCK_NOTE)."""
    with np.errstate(divide="ignore", over="ignore"):
        inv = (np.float32(1) / d).astype(np.float32)
    return np.where((d == 0) | ~np.isfinite(inv), np.float32(0), inv).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# CPU code reference


def quantize_q4_0_ref(w) -> GGMLTensor:
    """Plain NumPy, ggml's quantize_row_q4_0_ref. w: (N, K) float, K % 32 == 0."""
    w = _check(w, "q4_0")
    n, k = w.shape
    blocks = w.reshape(n, k // QK, QK)  # (N, B, 32)
    imax = np.abs(blocks).argmax(axis=2)[:, :, None]  # first of equal |w|, as ggml's `>`
    mx = np.take_along_axis(blocks, imax, axis=2)[:, :, 0]  # (N, B) signed
    d = (mx / np.float32(-8)).astype(np.float32)
    inv = _safe_inverse(d)[:, :, None]
    u = np.minimum(np.trunc(blocks * inv + Q4_0_LEVEL_OFFSET), NIBBLE_MAX).astype(np.uint8)
    return _assemble("q4_0", n, k, _fp16_bytes(d), _pack_nibbles(u))


def quantize_q4_1_ref(w) -> GGMLTensor:
    """Plain NumPy, ggml's quantize_row_q4_1_ref."""
    w = _check(w, "q4_1")
    n, k = w.shape
    blocks = w.reshape(n, k // QK, QK)
    mn, mx = blocks.min(axis=2), blocks.max(axis=2)  # (N, B)
    mn = mn + np.float32(0)  # -0.0 -> +0.0 (see the module docstring)
    d = ((mx - mn) / np.float32(NIBBLE_MAX)).astype(np.float32)
    inv = _safe_inverse(d)[:, :, None]
    u = np.minimum(np.trunc((blocks - mn[:, :, None]) * inv + Q4_1_ROUND), NIBBLE_MAX)
    return _assemble(
        "q4_1", n, k, _fp16_bytes(d), _fp16_bytes(mn), _pack_nibbles(u.astype(np.uint8))
    )


def _roundf(v: np.ndarray) -> np.ndarray:
    """C's roundf: half away from zero (np.rint rounds half to even). floor(|v| + 0.5) would
    round 0.49999997 up (the sum rounds to 1.0 in float32); gguf's np_roundf form does not."""
    a = np.abs(v)
    f = np.floor(a)
    return np.sign(v) * (f + np.floor(np.float32(2) * (a - f)))


def quantize_q8_0_ref(w) -> GGMLTensor:
    """Plain NumPy, ggml's quantize_row_q8_0_ref."""
    w = _check(w, "q8_0")
    n, k = w.shape
    blocks = w.reshape(n, k // QK, QK)
    d = (np.abs(blocks).max(axis=2) / np.float32(Q8_0_MAX_LEVEL)).astype(np.float32)
    inv = _safe_inverse(d)[:, :, None]
    q = _roundf(blocks * inv).astype(np.int8).view(np.uint8)
    return _assemble("q8_0", n, k, _fp16_bytes(d), q)


def dequantize_ggml(t: GGMLTensor) -> np.ndarray:
    """GGMLTensor -> (N, K) float32, as ggml's dequantize_row_* (and gguf.quants.dequantize)."""
    n, k = t.shape
    levels = t.levels().reshape(n, k // QK, QK).astype(np.float32)
    d = t.d.astype(np.float32)[:, :, None]
    if t.qtype == "q4_0":
        out = (levels - np.float32(8)) * d
    elif t.qtype == "q4_1":
        out = levels * d + t.m.astype(np.float32)[:, :, None]
    else:
        out = levels * d
    return out.reshape(n, k)


QUANTIZERS_REF = {"q4_0": quantize_q4_0_ref, "q4_1": quantize_q4_1_ref, "q8_0": quantize_q8_0_ref}


# ----------------------------------------------------------------------------------------------
# Fast path: one parallel pass over rows per format, the reference's float32 operations in the
# reference's order (the float16 rounding of d and m is left to NumPy: Numba has no float16).


@numba.njit(cache=True, inline="always")
def _block_inverse(d):
    """`_safe_inverse` of one block's d: 1 / d, and 0 where d = 0 or 1 / d overflows."""
    inv = np.float32(0.0) if d == 0 else np.float32(1.0) / d
    return inv if np.isfinite(inv) else np.float32(0.0)


@numba.njit(parallel=True, cache=True)
def _q4_0_rows(w):
    n, k = w.shape
    nb = k // QK
    d_out = np.empty((n, nb), dtype=np.float32)
    u_out = np.empty((n, nb, QK), dtype=np.uint8)
    for i in numba.prange(n):
        for b in range(nb):
            mx = w[i, b * QK]  # NumPy's argmax: the first of equal |w|
            amax = abs(mx)
            for j in range(1, QK):
                v = w[i, b * QK + j]
                if abs(v) > amax:
                    amax = abs(v)
                    mx = v
            d = mx / np.float32(-8.0)
            inv = _block_inverse(d)
            d_out[i, b] = d
            for j in range(QK):
                u = np.trunc(w[i, b * QK + j] * inv + np.float32(8.5))
                u_out[i, b, j] = np.uint8(min(u, np.float32(15.0)))
    return d_out, u_out


@numba.njit(parallel=True, cache=True)
def _q4_1_rows(w):
    n, k = w.shape
    nb = k // QK
    d_out = np.empty((n, nb), dtype=np.float32)
    m_out = np.empty((n, nb), dtype=np.float32)
    u_out = np.empty((n, nb, QK), dtype=np.uint8)
    for i in numba.prange(n):
        for b in range(nb):
            lo = w[i, b * QK]
            hi = lo
            for j in range(1, QK):
                v = w[i, b * QK + j]
                lo = min(lo, v)
                hi = max(hi, v)
            d = (hi - lo) / np.float32(15.0)
            inv = _block_inverse(d)
            d_out[i, b] = d
            m_out[i, b] = lo + np.float32(0.0)
            for j in range(QK):
                u = np.trunc((w[i, b * QK + j] - lo) * inv + np.float32(0.5))
                u_out[i, b, j] = np.uint8(min(u, np.float32(15.0)))
    return d_out, m_out, u_out


@numba.njit(parallel=True, cache=True)
def _q8_0_rows(w):
    n, k = w.shape
    nb = k // QK
    d_out = np.empty((n, nb), dtype=np.float32)
    q_out = np.empty((n, nb, QK), dtype=np.int8)
    for i in numba.prange(n):
        for b in range(nb):
            amax = np.float32(0.0)
            for j in range(QK):
                amax = max(amax, abs(w[i, b * QK + j]))
            d = amax / np.float32(127.0)
            inv = _block_inverse(d)
            d_out[i, b] = d
            for j in range(QK):
                v = w[i, b * QK + j] * inv
                a = abs(v)
                f = np.floor(a)
                r = f + np.floor(np.float32(2.0) * (a - f))
                q_out[i, b, j] = np.int8(-r if v < 0 else r)
    return d_out, q_out


def quantize_q4_0(w) -> GGMLTensor:
    """Fast (Numba, all cores) q4_0 quantizer; bit-identical to `quantize_q4_0_ref`."""
    w = _check(w, "q4_0")
    n, k = w.shape
    d, u = _q4_0_rows(w)
    return _assemble("q4_0", n, k, _fp16_bytes(d), _pack_nibbles(u))


def quantize_q4_1(w) -> GGMLTensor:
    """Fast (Numba, all cores) q4_1 quantizer; bit-identical to `quantize_q4_1_ref`."""
    w = _check(w, "q4_1")
    n, k = w.shape
    d, m, u = _q4_1_rows(w)
    return _assemble("q4_1", n, k, _fp16_bytes(d), _fp16_bytes(m), _pack_nibbles(u))


def quantize_q8_0(w) -> GGMLTensor:
    """Fast (Numba, all cores) q8_0 quantizer; bit-identical to `quantize_q8_0_ref`."""
    w = _check(w, "q8_0")
    n, k = w.shape
    d, q = _q8_0_rows(w)
    return _assemble("q8_0", n, k, _fp16_bytes(d), q.view(np.uint8))


QUANTIZERS = {"q4_0": quantize_q4_0, "q4_1": quantize_q4_1, "q8_0": quantize_q8_0}
