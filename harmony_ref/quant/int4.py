"""Group-wise INT4 weights: two signed nibbles per byte, one scale (and zero point) per group.

Format (declared once, checked in `Int4Tensor.__post_init__`), for a float matrix W of shape (N, K)
with groups of `group_size` consecutive elements along K:

    packed      (N, K // 2)           uint8    element 2j in the high nibble, 2j+1 in the low one
    scale       (N, K // group_size)  float16  (float32 on request, see `scale_dtype`)
    zero_point  (N, K // group_size)  int8     "asym" only; None for "sym"

Values are signed in [-8, 7]. "asym" (the reference recipe): step s = (max - min) / 15,
zp = round(-min / s) - 8, q = clamp(round(w / s + zp), -8, 7), w' = (q - zp) * s.
"sym": s = max|w| / 7, q = clamp(round(w / s), -7, 7), w' = q * s. We divide by 7, not by ggml's
signed "max / -8": ggml's choice buys one extra level but maps the opposite extreme to +8, which
clamps to 7 and costs up to a whole step there. /7 never clamps, so the half-step bound holds.

Two decisions the recipe leaves open, and why:
- The stored float16 scale is rounded *up* from the exact step. Rounded to nearest it could come
  out smaller than (max - min) / 15, the group would then span more than 15 steps and its extreme
  would clamp. Rounded up, every element is within half a stored step: |w - w'| <= s / 2 (plus
  float32 arithmetic, bounded in tests/quant/test_int4.py by `ROUNDTRIP_ABS_SLACK`).
- The zero point is stored as int8, so it must stay in [-128, 127]. For a group far from zero
  relative to its spread (all positive, say [100.0, 100.1]) the recipe's zp = round(-min / s) - 8
  would be about -15000. We widen the step just enough to keep zp in range (s >= min / 119 for
  positive groups, s >= |min| / 134 for negative ones). The group still round-trips within half
  of its (wider) step, and that step is at most max|w| / 119, finer than "sym" would give.
- A constant group (max == min == c) is stored as s = |c|, zp = -sign(c), q = 0, so w' = c exactly
  whenever c fits the scale dtype: always for float32 scales, and for float16 scales whenever c is
  a float16 value (any fp16/bf16-range checkpoint). Otherwise the error is c's float16 rounding,
  at most half a float16 ulp: 28 bits (fp16 scale + int8 zp + one nibble) cannot hold an
  arbitrary float32. No division by zero happens for c == 0.

`quantize_int4_ref` is the plain NumPy reference; `quantize_int4` is the Numba version and is
held bit-identical to the reference by tests/quant/test_int4.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from harmony_ref.quant._checks import as_float32_matrix

INT4_MIN = -8
INT4_MAX = 7
ASYM_LEVELS = 15  # (max - min) spans 15 steps: 16 levels from -8 to 7
SYM_MAX_LEVEL = 7
ZP_DTYPE = np.int8
# Divisors that keep round(-min / s) - 8 inside int8 for one-signed groups (see module doc).
POSITIVE_GROUP_ZP_DIVISOR = 119.0
NEGATIVE_GROUP_ZP_DIVISOR = 134.0
SCHEMES = ("asym", "sym")
SCALE_DTYPES = (np.float16, np.float32)


@dataclass(frozen=True, eq=False)
class Int4Tensor:
    """A (N, K) matrix stored as group-wise INT4. Arrays are the real storage: `nbytes` and
    `bits_per_weight` are computed from them, never from a formula."""

    packed: np.ndarray  # (N, K // 2) uint8
    scale: np.ndarray  # (N, K // group_size) float16 or float32
    zero_point: np.ndarray | None  # (N, K // group_size) int8, or None for "sym"
    shape: tuple[int, int]
    group_size: int
    scheme: str

    def __post_init__(self):
        n, k = self.shape
        groups = k // self.group_size
        if self.scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}, got {self.scheme!r}")
        if self.packed.dtype != np.uint8 or self.packed.shape != (n, k // 2):
            raise ValueError(
                f"packed must be uint8 of shape {(n, k // 2)}, "
                f"got {self.packed.dtype} {self.packed.shape}"
            )
        if self.scale.dtype.type not in SCALE_DTYPES or self.scale.shape != (n, groups):
            raise ValueError(
                f"scale must be float16/float32 of shape {(n, groups)}, "
                f"got {self.scale.dtype} {self.scale.shape}"
            )
        if self.scheme == "asym":
            zp = self.zero_point
            if zp is None or zp.dtype != ZP_DTYPE or zp.shape != (n, groups):
                got = None if zp is None else (zp.dtype, zp.shape)
                raise ValueError(f"asym zero_point must be int8 of shape {(n, groups)}, got {got}")
        elif self.zero_point is not None:
            raise ValueError("sym INT4 has no zero_point")

    @property
    def n_groups(self) -> int:
        return self.shape[1] // self.group_size

    @property
    def nbytes(self) -> int:
        zp = 0 if self.zero_point is None else self.zero_point.nbytes
        return self.packed.nbytes + self.scale.nbytes + zp

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.nbytes / (self.shape[0] * self.shape[1])

    @property
    def format_name(self) -> str:
        return f"int4-g{self.group_size}-{self.scheme}"


def _check_args(w, group_size: int, scheme: str, scale_dtype) -> tuple[np.ndarray, type]:
    w = as_float32_matrix(w)
    n, k = w.shape
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    if not isinstance(group_size, (int, np.integer)) or group_size <= 0:
        raise ValueError(f"group_size must be a positive integer, got {group_size!r}")
    if k % group_size != 0:
        raise ValueError(
            f"K = {k} (shape {w.shape}) is not a multiple of group_size = {group_size}"
        )
    if k % 2 != 0:
        raise ValueError(f"K = {k} (shape {w.shape}) must be even: two nibbles share a byte")
    scale_dtype = np.dtype(scale_dtype).type
    if scale_dtype not in SCALE_DTYPES:
        raise ValueError(f"scale_dtype must be float16 or float32, got {np.dtype(scale_dtype)}")
    return w, scale_dtype


# ----------------------------------------------------------------------------------------------
# Group parameters: shared by the reference and the fast path. Both compute per-group min/max
# their own way; turning min/max into stored scales and zero points is done here, once, because
# Numba has no float16 and the rounding-up must be identical.


def _store_scale_rounding_up(step: np.ndarray, scale_dtype) -> np.ndarray:
    """Smallest `scale_dtype` value >= step (float32), elementwise."""
    with np.errstate(over="ignore"):  # overflow becomes inf and is reported by the caller
        stored = step.astype(scale_dtype)
    low = stored.astype(np.float32) < step
    stored[low] = np.nextafter(stored[low], scale_dtype(np.inf))
    return stored


def _group_params(mn, mx, scheme: str, scale_dtype, group_size: int):
    """(N, G) float32 min/max -> stored scale, float32 view of it, int8 zp (or None)."""
    constant = mn == mx
    if scheme == "asym":
        step = (mx - mn) / np.float32(ASYM_LEVELS)
        step = np.maximum(step, mn / np.float32(POSITIVE_GROUP_ZP_DIVISOR))
        step = np.maximum(step, -mn / np.float32(NEGATIVE_GROUP_ZP_DIVISOR))
    else:
        step = np.maximum(np.abs(mn), np.abs(mx)) / np.float32(SYM_MAX_LEVEL)
    step = step.astype(np.float32)
    # A span of a few subnormals divided by 15 underflows to 0: keep the step above zero.
    step = np.where((step == 0) & ~constant, np.finfo(np.float32).smallest_subnormal, step)
    step = step.astype(np.float32)
    scale = _store_scale_rounding_up(step, scale_dtype)
    # A constant group stores |c| itself (nearest, not up) so that w' = c exactly when it fits.
    with np.errstate(over="ignore"):
        scale[constant] = np.abs(mn[constant]).astype(scale_dtype)
    if not np.isfinite(scale).all():
        i, g = np.argwhere(~np.isfinite(scale))[0]
        raise ValueError(
            f"group ({i}, {g}) of group_size {group_size} spans [{mn[i, g]}, {mx[i, g]}]: "
            f"its scale overflows {np.dtype(scale_dtype)}; use scale_dtype=float32"
        )
    scale_f32 = scale.astype(np.float32)
    if scheme == "sym":
        return scale, scale_f32, None
    safe = np.where(scale_f32 == 0, np.float32(1), scale_f32)
    zp = np.rint(-mn / safe) - np.float32(8)
    zp[constant] = -np.sign(mn[constant])
    zp = np.clip(zp, -128, 127).astype(ZP_DTYPE)
    return scale, scale_f32, zp


# ----------------------------------------------------------------------------------------------
# CPU code reference


def quantize_int4_ref(w, group_size: int = 32, scheme: str = "asym", scale_dtype=np.float16):
    """Plain NumPy reference. w: (N, K) float -> Int4Tensor."""
    w, scale_dtype = _check_args(w, group_size, scheme, scale_dtype)
    n, k = w.shape
    groups = w.reshape(n, k // group_size, group_size)  # (N, G, g)
    mn = groups.min(axis=2)  # (N, G)
    mx = groups.max(axis=2)
    scale, scale_f32, zp = _group_params(mn, mx, scheme, scale_dtype, group_size)

    safe = np.where(scale_f32 == 0, np.float32(1), scale_f32)[:, :, None]  # (N, G, 1)
    if scheme == "asym":
        q = np.rint(groups / safe + zp.astype(np.float32)[:, :, None])
        q = np.clip(q, INT4_MIN, INT4_MAX)
    else:
        q = np.clip(np.rint(groups / safe), -SYM_MAX_LEVEL, SYM_MAX_LEVEL)
    q = q.astype(np.int8).reshape(n, k)  # (N, K) in [-8, 7]

    high = (q[:, 0::2] & 0x0F).astype(np.uint8)  # even index -> high nibble
    low = (q[:, 1::2] & 0x0F).astype(np.uint8)
    packed = (high << 4) | low  # (N, K // 2) uint8
    return Int4Tensor(packed, scale, zp, (n, k), int(group_size), scheme)


def unpack_int4(packed: np.ndarray) -> np.ndarray:
    """(N, K // 2) uint8 -> (N, K) int8 in [-8, 7], undoing the high-nibble-first packing."""
    high = (packed >> 4).astype(np.int8)
    low = (packed & 0x0F).astype(np.int8)
    q = np.empty((packed.shape[0], packed.shape[1] * 2), dtype=np.int8)
    q[:, 0::2] = (high ^ 8) - 8  # sign-extend the nibble without a branch
    q[:, 1::2] = (low ^ 8) - 8
    return q


def dequantize_int4(t: Int4Tensor) -> np.ndarray:
    """Int4Tensor -> float32 (N, K): w' = (q - zp) * s per group."""
    n, k = t.shape
    q = unpack_int4(t.packed).reshape(n, t.n_groups, t.group_size).astype(np.float32)
    s = t.scale.astype(np.float32)[:, :, None]
    if t.scheme == "asym":
        q = q - t.zero_point.astype(np.float32)[:, :, None]
    return (q * s).reshape(n, k)


# ----------------------------------------------------------------------------------------------
# Fast path: two parallel passes over rows (min/max per group, then quantize + pack), same
# float32 operations in the same order as the reference, so the result is bit-identical.


@numba.njit(parallel=True, cache=True)
def _group_min_max(w, group_size):
    n, k = w.shape
    n_groups = k // group_size
    mn = np.empty((n, n_groups), dtype=np.float32)
    mx = np.empty((n, n_groups), dtype=np.float32)
    for i in numba.prange(n):
        for g in range(n_groups):
            lo = w[i, g * group_size]
            hi = lo
            for j in range(g * group_size + 1, (g + 1) * group_size):
                v = w[i, j]
                lo = min(lo, v)
                hi = max(hi, v)
            mn[i, g] = lo
            mx[i, g] = hi
    return mn, mx


@numba.njit(parallel=True, cache=True)
def _quantize_pack(w, scale_f32, zp_f32, group_size, qmin, qmax):
    n, k = w.shape
    packed = np.empty((n, k // 2), dtype=np.uint8)
    one = np.float32(1.0)
    for i in numba.prange(n):
        for j in range(0, k, 2):
            g = j // group_size
            g2 = (j + 1) // group_size
            s = scale_f32[i, g]
            s = one if s == 0 else s
            s2 = scale_f32[i, g2]
            s2 = one if s2 == 0 else s2
            q0 = min(max(np.rint(w[i, j] / s + zp_f32[i, g]), qmin), qmax)
            q1 = min(max(np.rint(w[i, j + 1] / s2 + zp_f32[i, g2]), qmin), qmax)
            packed[i, j // 2] = ((np.int32(q0) & 0x0F) << 4) | (np.int32(q1) & 0x0F)
    return packed


def quantize_int4(w, group_size: int = 32, scheme: str = "asym", scale_dtype=np.float16):
    """Fast (Numba, all cores) group-wise INT4 quantizer; bit-identical to `quantize_int4_ref`.

    w: (N, K) float16/32/64, K a multiple of `group_size` and even.
    """
    w, scale_dtype = _check_args(w, group_size, scheme, scale_dtype)
    n, k = w.shape
    mn, mx = _group_min_max(w, group_size)
    scale, scale_f32, zp = _group_params(mn, mx, scheme, scale_dtype, group_size)
    if scheme == "asym":
        zp_f32 = zp.astype(np.float32)
        qmin, qmax = np.float32(INT4_MIN), np.float32(INT4_MAX)
    else:
        zp_f32 = np.zeros_like(scale_f32)
        qmin, qmax = np.float32(-SYM_MAX_LEVEL), np.float32(SYM_MAX_LEVEL)
    packed = _quantize_pack(w, scale_f32, zp_f32, group_size, qmin, qmax)
    return Int4Tensor(packed, scale, zp, (n, k), int(group_size), scheme)
