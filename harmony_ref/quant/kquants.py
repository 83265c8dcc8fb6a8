"""GGUF's Q5_0 and K-quant formats (Q4_K, Q5_K, Q6_K, and Q8_K, the activation format their dot
products take), stored as the file stores them, with llama.cpp's reference quantizers and
dequantizers in plain NumPy: the bytes are those of ggml-quants.c's quantize_row_<type>_ref, which
llama-quantize runs when it has no importance matrix (tests/quant/test_kquants.py holds them equal
to llama-quantize's output committed in tests/fixtures/kquants/, and Q5_0 and every dequantizer
equal to the `gguf` package's).

    t = quantize_kquant_ref(w, "q4_k")     # (N, K) float -> KQuantTensor, K % 256 == 0
    dequantize_kquant(t)                    # -> (N, K) float32, as ggml's dequantize_row_q4_K
    quantize_q8_k_ref(x)                    # (M, K) float -> (qs int8, d float32, bsums int16)

Blocks (ggml's src/ggml-common.h; one dtype each below, sizes checked; little-endian):

    q5_0  22 B / 32 w     d f16 | qh 4 B: bit j = 5th bit of weight j | qs 16 B: byte j = low
                          nibbles of weights j, j + 16.          w' = (u - 16) d, u in 0..31
    q4_k  144 B / 256 w   d f16 | dmin f16 | scales 12 B: eight 6-bit (sc, m) pairs, one per
                          32-weight sub-block | qs 128 B: 64-weight chunk c, byte l = low nibble
                          weight 64c + l, high nibble weight 64c + 32 + l.
                          w' = d sc_s u - dmin m_s, u in 0..15
    q5_k  176 B / 256 w   q4_k's fields + qh 32 B: bit 2c of byte l = 5th bit of weight 64c + l,
                          bit 2c + 1 of weight 64c + 32 + l.      u in 0..31
    q6_k  210 B / 256 w   ql 128 B | qh 64 B | scales 16 int8 (one per 16 weights) | d f16;
                          128-weight half h, l < 32: ql[64h + l] = low nibbles of weights
                          128h + l (low) and + 64 (high), ql[64h + 32 + l] of + 32 and + 96;
                          qh[32h + l] 2 bits each of weights + 0, + 32, + 64, + 96.
                          w' = d sc_g (u - 32), u in 0..63
    q8_k  292 B / 256 w   d f32 | qs 256 int8 | bsums 16 int16 (sums of 16 qs)     x' = q d

Quantizers, in ggml's float32 operations and order (sums run element by element, as the C loops
do, never NumPy's pairwise sum; ggml-base is built without FMA, so no product is fused):
- q4_k / q5_k: per 32-weight sub-block, make_qkx2_quants, a weighted least-squares fit of scale
  and min (weights av_x + |w|, av_x the sub-block's RMS) over 21 (q5_k: 16) candidate steps; the
  eight scales and mins are then quantized to 6 bits against the block's largest, and the weights
  requantized against the stored (float16 x 6-bit) scale and min.
- q6_k: per 16-weight group, make_qx_quants (rmse_type 1: weights w^2, 18 candidate scales around
  -32 / max); the 16 scales to int8 against the block's largest |scale|.
- q5_0: q4_0's rule with 32 levels: d = max / -16 (max the first largest |w|), u =
  min(31, trunc(w / d + 16.5)).
- q8_k: d = max / -127 (the first largest |x|), q = round(x / d).
nearest_int is ggml's bit trick (add 1.5 * 2^23, read the mantissa): round half to even for
|v| < 2^22, and the same garbage as ggml's beyond. A q5_0 block whose 1 / d overflows float32 is
stored as weight 0 (level 16; quant/ggml.py's TINY_BLOCK_NOTE: C leaves that cast undefined), and
an all-zero block's d is -0.0, as ggml's (its max starts at +0.0; the `gguf` package has +0.0).
There is no Numba quantizer here: kernels/formats.py's `quantize` is `quantize_kquant_ref` (a few
seconds for a 135M model).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harmony_ref.quant._checks import as_float32_matrix
from harmony_ref.quant.ggml import GGMLTensor, _safe_inverse, check_block_bytes

QK_K = 256  # weights per K-quant super-block
QK5_0 = 32
K_SCALE_SIZE = 12  # bytes of q4_k / q5_k's packed 6-bit scales and mins
GROUP_MAX_EPS = np.float32(1e-15)  # ggml-quants.c: below it a group is "all zero"

BLOCK_DTYPES = {
    "q5_0": np.dtype([("d", "<f2"), ("qh", "<u4"), ("qs", "u1", 16)]),
    "q4_k": np.dtype(
        [("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", K_SCALE_SIZE), ("qs", "u1", 128)]
    ),
    "q5_k": np.dtype(
        [
            ("d", "<f2"),
            ("dmin", "<f2"),
            ("scales", "u1", K_SCALE_SIZE),
            ("qh", "u1", 32),
            ("qs", "u1", 128),
        ]
    ),
    "q6_k": np.dtype([("ql", "u1", 128), ("qh", "u1", 64), ("scales", "i1", 16), ("d", "<f2")]),
}
BLOCK_WEIGHTS = {"q5_0": QK5_0, "q4_k": QK_K, "q5_k": QK_K, "q6_k": QK_K}
KQUANT_TYPES = tuple(BLOCK_DTYPES)
Q8_K_DTYPE = np.dtype([("d", "<f4"), ("qs", "i1", QK_K), ("bsums", "<i2", QK_K // 16)])

# ggml's static_asserts
assert {k: v.itemsize for k, v in BLOCK_DTYPES.items()} == {
    "q5_0": 22,
    "q4_k": 144,
    "q5_k": 176,
    "q6_k": 210,
}
assert Q8_K_DTYPE.itemsize == 4 + QK_K + QK_K // 16 * 2


@dataclass(frozen=True, eq=False)
class KQuantTensor:
    """A (N, K) matrix in q5_0 or a K-quant: `data` (N, K / block weights * block bytes) uint8
    is the tensor's bytes in the file, row after row (a GGUF tensor of shape [K, N])."""

    qtype: str  # q5_0 | q4_k | q5_k | q6_k
    data: np.ndarray
    shape: tuple[int, int]

    def __post_init__(self):
        if self.qtype not in BLOCK_DTYPES:
            raise ValueError(f"qtype must be one of {KQUANT_TYPES}, got {self.qtype!r}")
        check_block_bytes(self, BLOCK_WEIGHTS[self.qtype], BLOCK_DTYPES[self.qtype].itemsize)

    @property
    def format_name(self) -> str:
        return self.qtype

    @property
    def blocks(self) -> np.ndarray:
        """(N, K / block weights) structured view, fields as BLOCK_DTYPES names them."""
        return np.ascontiguousarray(self.data).view(BLOCK_DTYPES[self.qtype])

    # the same bytes-per-row container as GGMLTensor (rows, sizes: quant/ggml.py)
    nbytes = GGMLTensor.nbytes
    bits_per_weight = GGMLTensor.bits_per_weight
    rows = GGMLTensor.rows  # the rows `index` (a permutation or a slice) as a new tensor


def _check(w, qtype: str) -> np.ndarray:
    w = as_float32_matrix(w)
    qk = BLOCK_WEIGHTS.get(qtype, QK_K)
    if w.shape[1] % qk:
        raise ValueError(
            f"K = {w.shape[1]} (shape {w.shape}) is not a multiple of {qk}: "
            f"{qtype} stores blocks of {qk} weights along K"
        )
    return w


def _f32(v) -> np.ndarray:
    return np.asarray(v, dtype=np.float32)


def nearest_int(v) -> np.ndarray:
    """ggml's nearest_int: float32 -> int32 through the bits of v + 1.5 * 2^23."""
    with np.errstate(invalid="ignore", over="ignore"):
        bits = (_f32(v) + np.float32(12582912.0)).astype(np.float32).view(np.int32)
    return (bits & 0x007FFFFF) - 0x00400000


def _fp16_round(v) -> np.ndarray:
    """float32 -> float16 -> float32: what GGML_FP32_TO_FP16 stores and FP16_TO_FP32 reads."""
    with np.errstate(over="ignore"):
        return _f32(v).astype(np.float16)


def _seq_sum(terms) -> np.ndarray:
    """Sum of float32 terms (..., n) along the last axis, one after another (ggml's loop)."""
    acc = np.zeros(terms.shape[:-1], dtype=np.float32)
    for i in range(terms.shape[-1]):
        acc = acc + terms[..., i]
    return acc


def _first_absmax(x) -> np.ndarray:
    """(..., n) -> (...) the first x of largest |x| (ggml's `if (ax > amax)` scan, which starts
    from max = +0.0: an all-zero group's max is +0.0 even when its first element is -0.0)."""
    i = np.abs(x).argmax(axis=-1)[..., None]
    mx = np.take_along_axis(x, i, axis=-1)[..., 0]
    return np.where(mx == 0, np.float32(0), mx)


# ----------------------------------------------------------------------------------------------
# CPU code reference: ggml-quants.c's helpers, vectorised over groups (rows of x)


def make_qkx2_quants(x, weights, nmax: int, rmin: float, rdelta: float, nstep: int):
    """ggml's make_qkx2_quants over groups x (G, n) with weights (G, n), use_mad false:
    -> (scale (G,) float32, the_min (G,) float32 (the negated offset), L (G, n) uint8)."""
    x, weights = _f32(x), _f32(weights)
    n = x.shape[1]
    mn, mx = x[:, 0].copy(), x[:, 0].copy()
    sum_w = weights[:, 0].copy()
    sum_x = sum_w * x[:, 0]
    for i in range(1, n):
        mn = np.where(x[:, i] < mn, x[:, i], mn)
        mx = np.where(x[:, i] > mx, x[:, i], mx)
        sum_w = sum_w + weights[:, i]
        sum_x = sum_x + weights[:, i] * x[:, i]
    mn = np.where(mn > 0, np.float32(0), mn)
    flat = mx == mn
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        iscale = np.float32(nmax) / np.where(flat, np.float32(1), mx - mn)  # flat: L = 0, scale 0
        scale = np.float32(1) / iscale
        lv = np.clip(nearest_int(iscale[:, None] * (x - mn[:, None])), 0, nmax)
        diff = (scale[:, None] * lv.astype(np.float32) + mn[:, None]) - x
        best = _seq_sum(weights * (diff * diff))
        for step in range(nstep + 1):
            num = np.float32(rmin) + np.float32(rdelta) * np.float32(step) + np.float32(nmax)
            iscale = num / np.where(flat, np.float32(1), mx - mn)  # mn moves with the best fit
            laux = np.clip(nearest_int(iscale[:, None] * (x - mn[:, None])), 0, nmax)
            lf = laux.astype(np.float32)
            wl = weights * lf
            sum_l, sum_l2, sum_xl = _seq_sum(wl), _seq_sum(wl * lf), _seq_sum(wl * x)
            big_d = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / big_d
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / big_d
            clamp = this_min > 0
            this_scale = np.where(clamp, sum_xl / sum_l2, this_scale)
            this_min = np.where(clamp, np.float32(0), this_min)
            diff = (this_scale[:, None] * lf + this_min[:, None]) - x
            cur = _seq_sum(weights * (diff * diff))
            better = (big_d > 0) & (cur < best) & ~flat
            lv = np.where(better[:, None], laux, lv)
            best = np.where(better, cur, best)
            scale = np.where(better, this_scale, scale)
            mn = np.where(better, this_min, mn)
    lv = np.where(flat[:, None], 0, lv)
    scale = np.where(flat, np.float32(0), scale)
    return scale.astype(np.float32), (-mn).astype(np.float32), lv.astype(np.uint8)


def make_qx_quants_rmse1(x, nmax: int):
    """ggml's make_qx_quants(n, nmax, x, L, rmse_type = 1, NULL) over groups x (G, n):
    -> (scale (G,) float32, L (G, n) uint8 = l + nmax)."""
    x = _f32(x)
    mx = _first_absmax(x)
    zero = np.abs(mx) < GROUP_MAX_EPS
    safe = np.where(zero, np.float32(1), mx)
    w = x * x

    def levels(iscale):
        lv = np.clip(nearest_int(iscale[:, None] * x), -nmax, nmax - 1)
        lf = lv.astype(np.float32)
        return lv, _seq_sum((w * x) * lf), _seq_sum((w * lf) * lf)

    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        iscale = np.float32(-nmax) / safe
        lv, sumlx, suml2 = levels(iscale)
        scale = np.where(suml2 != 0, sumlx / suml2, np.float32(0))
        best = scale * sumlx
        for step in range(-9, 10):
            if step == 0:
                continue
            iscale = -(np.float32(nmax) + np.float32(0.1) * np.float32(step)) / safe
            laux, sumlx, suml2 = levels(iscale)
            better = (suml2 > 0) & (sumlx * sumlx > best * suml2)
            lv = np.where(better[:, None], laux, lv)
            scale = np.where(better, sumlx / suml2, scale)
            best = np.where(better, scale * sumlx, best)
    lv = np.where(zero[:, None], -nmax, lv)
    scale = np.where(zero, np.float32(0), scale)
    return scale.astype(np.float32), (lv + nmax).astype(np.uint8)


def _running_max(v) -> np.ndarray:
    """(..., n) -> max(0, v_0, v_1, ...) by ggml's `if (v > best) best = v` scan."""
    best = np.zeros(v.shape[:-1], dtype=np.float32)
    for i in range(v.shape[-1]):
        best = np.where(v[..., i] > best, v[..., i], best)
    return best


def _pack_scales_k4(ls, lm) -> np.ndarray:
    """(..., 8) 6-bit scales and mins -> (..., 12) uint8 as quantize_row_q4_K_ref packs them."""
    ls, lm = ls.astype(np.uint8), lm.astype(np.uint8)
    out = np.zeros(ls.shape[:-1] + (K_SCALE_SIZE,), dtype=np.uint8)
    out[..., 0:4] = ls[..., 0:4] | ((ls[..., 4:8] >> 4) << 6)
    out[..., 4:8] = lm[..., 0:4] | ((lm[..., 4:8] >> 4) << 6)
    out[..., 8:12] = (ls[..., 4:8] & 0xF) | ((lm[..., 4:8] & 0xF) << 4)
    return out


def unpack_scales_k4(scales) -> tuple[np.ndarray, np.ndarray]:
    """(..., 12) uint8 -> (sc, m) each (..., 8) uint8: ggml's get_scale_min_k4 for j = 0..7."""
    q = scales.astype(np.uint8)
    sc = np.concatenate([q[..., 0:4] & 63, (q[..., 8:12] & 0xF) | ((q[..., 0:4] >> 6) << 4)], -1)
    m = np.concatenate([q[..., 4:8] & 63, (q[..., 8:12] >> 4) | ((q[..., 4:8] >> 6) << 4)], -1)
    return sc, m


def _quantize_k_scale_min(x, nmax: int, rmin: float, nstep: int):
    """q4_k / q5_k's common part: x (N, B, 256) -> (d f16, dmin f16, scales (N, B, 12),
    L (N, B, 256) uint8 in 0..nmax)."""
    n, nb = x.shape[:2]
    sub = x.reshape(-1, 32)
    sum_x2 = _seq_sum(sub * sub)
    av_x = np.sqrt(sum_x2 / np.float32(32)).astype(np.float32)
    weights = av_x[:, None] + np.abs(sub)
    scales, mins, lv = make_qkx2_quants(sub, weights, nmax, rmin, 0.1, nstep)
    scales, mins = scales.reshape(n, nb, 8), mins.reshape(n, nb, 8)
    lv = lv.reshape(n, nb, 8, 32)
    max_scale, max_min = _running_max(scales), _running_max(mins)
    with np.errstate(divide="ignore"):
        inv_scale = np.where(max_scale > 0, np.float32(63) / max_scale, np.float32(0))
        inv_min = np.where(max_min > 0, np.float32(63) / max_min, np.float32(0))
    ls = np.minimum(nearest_int(inv_scale[..., None] * scales) & 0xFF, 63)
    lm = np.minimum(nearest_int(inv_min[..., None] * mins) & 0xFF, 63)
    d = _fp16_round(max_scale / np.float32(63))
    dmin = _fp16_round(max_min / np.float32(63))
    sub_d = d.astype(np.float32)[..., None] * ls.astype(np.float32)  # (N, B, 8)
    sub_m = dmin.astype(np.float32)[..., None] * lm.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        req = nearest_int((x.reshape(n, nb, 8, 32) + sub_m[..., None]) / sub_d[..., None])
    req = np.clip(req, 0, nmax)
    lv = np.where((sub_d != 0)[..., None], req, lv).astype(np.uint8).reshape(n, nb, QK_K)
    return d, dmin, _pack_scales_k4(ls, lm), lv


def _assemble(qtype: str, fields: dict, n: int, k: int) -> KQuantTensor:
    nb = k // BLOCK_WEIGHTS[qtype]
    blocks = np.zeros((n, nb), dtype=BLOCK_DTYPES[qtype])
    for name, value in fields.items():
        blocks[name] = value
    return KQuantTensor(qtype, blocks.view(np.uint8).reshape(n, -1), (n, k))


def _chunks(lv, size: int):
    """(N, B, 256) -> (N, B, 256 / size, size): the C loops' chunk c, offset l."""
    return lv.reshape(lv.shape[0], lv.shape[1], -1, size)


def quantize_q4_k_ref(w) -> KQuantTensor:
    """Plain NumPy, ggml's quantize_row_q4_K_ref. w: (N, K) float, K % 256 == 0."""
    w = _check(w, "q4_k")
    n, k = w.shape
    d, dmin, scales, lv = _quantize_k_scale_min(w.reshape(n, k // QK_K, QK_K), 15, -1.0, 20)
    c = _chunks(lv, 64)  # (N, B, 4, 64)
    qs = (c[..., :32] | (c[..., 32:] << 4)).reshape(n, -1, 128)
    return _assemble("q4_k", {"d": d, "dmin": dmin, "scales": scales, "qs": qs}, n, k)


def quantize_q5_k_ref(w) -> KQuantTensor:
    """Plain NumPy, ggml's quantize_row_q5_K_ref."""
    w = _check(w, "q5_k")
    n, k = w.shape
    d, dmin, scales, lv = _quantize_k_scale_min(w.reshape(n, k // QK_K, QK_K), 31, -0.5, 15)
    c = _chunks(lv, 64)
    lo, hi = c[..., :32], c[..., 32:]
    qs = ((lo & 0xF) | ((hi & 0xF) << 4)).reshape(n, -1, 128)
    shift = (2 * np.arange(4, dtype=np.uint8))[:, None]  # chunk c -> bits 2c, 2c + 1
    qh = (((lo >> 4) << shift) | ((hi >> 4) << (shift + 1))).sum(axis=2, dtype=np.uint8)
    return _assemble("q5_k", {"d": d, "dmin": dmin, "scales": scales, "qh": qh, "qs": qs}, n, k)


def quantize_q6_k_ref(w) -> KQuantTensor:
    """Plain NumPy, ggml's quantize_row_q6_K_ref."""
    w = _check(w, "q6_k")
    n, k = w.shape
    nb = k // QK_K
    x = w.reshape(n, nb, 16, 16)
    scales, lv = make_qx_quants_rmse1(x.reshape(-1, 16), 32)
    scales, lv = scales.reshape(n, nb, 16), lv.reshape(n, nb, 16, 16)
    max_scale = _first_absmax(scales)
    zero = np.abs(max_scale) < GROUP_MAX_EPS
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = np.float32(-128) / np.where(zero, np.float32(1), max_scale)
        d = _fp16_round(np.float32(1) / iscale)
        sc = (np.minimum(127, nearest_int(iscale[..., None] * scales)) & 0xFF).astype(np.uint8)
        sc = sc.view(np.int8)
        gd = d.astype(np.float32)[..., None] * sc.astype(np.float32)  # (N, B, 16)
        req = np.clip(nearest_int(x / gd[..., None]), -32, 31) + 32
    lv = np.where((gd != 0)[..., None], req, lv).astype(np.uint8).reshape(n, nb, QK_K)
    c = _chunks(lv, 128)  # (N, B, 2, 128): half h, then l + 32 q for q = 0..3
    q1, q2, q3, q4 = (c[..., 32 * q : 32 * q + 32] for q in range(4))
    ql = np.concatenate([(q1 & 0xF) | ((q3 & 0xF) << 4), (q2 & 0xF) | ((q4 & 0xF) << 4)], -1)
    qh = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)
    fields = {"ql": ql.reshape(n, nb, 128), "qh": qh.reshape(n, nb, 64), "scales": sc, "d": d}
    zero_blocks = zero[..., None]
    for name in ("ql", "qh"):
        fields[name] = np.where(zero_blocks, 0, fields[name])
    fields["scales"] = np.where(zero_blocks, 0, sc)
    fields["d"] = np.where(zero, np.float16(0), d)
    return _assemble("q6_k", fields, n, k)


def quantize_q5_0_ref(w) -> KQuantTensor:
    """Plain NumPy, ggml's quantize_row_q5_0_ref."""
    w = _check(w, "q5_0")
    n, k = w.shape
    blocks = w.reshape(n, k // QK5_0, QK5_0)
    d = (_first_absmax(blocks) / np.float32(-16)).astype(np.float32)
    inv = _safe_inverse(d)[..., None]
    u = np.minimum(np.trunc(blocks * inv + np.float32(16.5)), 31).astype(np.uint8)
    qs = (u[..., :16] & 0xF) | ((u[..., 16:] & 0xF) << 4)
    bits = ((u >> 4) & 1).astype(np.uint32) << np.arange(32, dtype=np.uint32)
    qh = bits.sum(axis=-1, dtype=np.uint32)
    return _assemble("q5_0", {"d": _fp16_round(d), "qh": qh, "qs": qs}, n, k)


def quantize_q8_k_ref(x) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ggml's quantize_row_q8_K_ref over the rows of x (M, K), K % 256 == 0:
    -> qs (M, K) int8, d (M, K / 256) float32, bsums (M, K / 16) int16."""
    x = _check(x, "q8_k")
    m, k = x.shape
    blocks = x.reshape(m, k // QK_K, QK_K)
    mx = _first_absmax(blocks)
    zero = mx == 0
    with np.errstate(divide="ignore"):
        iscale = np.float32(-127) / np.where(zero, np.float32(1), mx)
    q = np.minimum(127, nearest_int(iscale[..., None] * blocks))
    q = np.where(zero[..., None], 0, q).astype(np.int8)
    d = np.where(zero, np.float32(0), np.float32(1) / iscale).astype(np.float32)
    bsums = q.reshape(m, -1, 16).sum(axis=-1, dtype=np.int16)
    return q.reshape(m, k), d, bsums


QUANTIZERS_REF = {
    "q5_0": quantize_q5_0_ref,
    "q4_k": quantize_q4_k_ref,
    "q5_k": quantize_q5_k_ref,
    "q6_k": quantize_q6_k_ref,
}


def quantize_kquant_ref(w, qtype: str) -> KQuantTensor:
    """(N, K) float -> KQuantTensor of `qtype` (ggml's quantize_row_<qtype>_ref)."""
    if qtype not in QUANTIZERS_REF:
        raise ValueError(f"qtype must be one of {KQUANT_TYPES}, got {qtype!r}")
    return QUANTIZERS_REF[qtype](w)


# ----------------------------------------------------------------------------------------------
# Levels and dequantization


def levels(t: KQuantTensor) -> np.ndarray:
    """(N, K) uint8 unsigned levels u in weight order: q5_0 0..31, q4_k 0..15, q5_k 0..31,
    q6_k 0..63 (the weight is (u - 16) d, d sc u - dmin m, or d sc (u - 32))."""
    n, k = t.shape
    b = t.blocks
    if t.qtype == "q5_0":
        qs = b["qs"]  # (N, B, 16)
        hbit = ((b["qh"][..., None] >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)
        u = np.concatenate([qs & 0xF, qs >> 4], -1) | (hbit << 4)
        return u.reshape(n, k)
    if t.qtype in ("q4_k", "q5_k"):
        qs = b["qs"].reshape(n, -1, 4, 32)
        u = np.concatenate([qs & 0xF, qs >> 4], -1)  # (N, B, 4, 64)
        if t.qtype == "q5_k":
            shift = (2 * np.arange(4, dtype=np.uint8))[:, None]
            qh = b["qh"][:, :, None, :]  # (N, B, 1, 32)
            hi = np.concatenate([(qh >> shift) & 1, (qh >> (shift + 1)) & 1], -1)
            u = u | (hi << 4)
        return u.reshape(n, k)
    ql = b["ql"].reshape(n, -1, 2, 2, 32)  # half, (l, l + 32) byte rows
    qh = b["qh"].reshape(n, -1, 2, 1, 32)
    low = np.concatenate([ql & 0xF, ql >> 4], axis=3)  # (N, B, 2, 4, 32): q1 q2 q3 q4
    high = (qh >> (2 * np.arange(4, dtype=np.uint8))[:, None]) & 3  # (N, B, 2, 4, 32)
    u = low | (high << 4)
    return u.reshape(n, k)


def dequantize_kquant(t: KQuantTensor) -> np.ndarray:
    """KQuantTensor -> (N, K) float32, as ggml's dequantize_row_<type> (float32, same order)."""
    n, k = t.shape
    b = t.blocks
    u = levels(t).astype(np.float32)
    if t.qtype == "q5_0":
        out = (u.reshape(n, -1, 32) - np.float32(16)) * b["d"].astype(np.float32)[..., None]
    elif t.qtype == "q6_k":
        gd = b["d"].astype(np.float32)[..., None] * b["scales"].astype(np.float32)  # (N, B, 16)
        out = gd[..., None] * (u.reshape(n, -1, 16, 16) - np.float32(32))
    else:
        sc, m = unpack_scales_k4(b["scales"])  # (N, B, 8)
        d1 = b["d"].astype(np.float32)[..., None] * sc.astype(np.float32)
        m1 = b["dmin"].astype(np.float32)[..., None] * m.astype(np.float32)
        out = d1[..., None] * u.reshape(n, -1, 8, 32) - m1[..., None]
    return out.reshape(n, k).astype(np.float32)
