"""LayerNorm + bias + GELU: one fused kernel (`norm_bias_gelu`) and the same chain as three
separate kernels (`layer_norm`, `bias_add`, `gelu`), with NumPy twins (`*_ref`).

    y = gelu(layer_norm(x, gamma, beta, eps) + bias)      over the last axis of x (..., D)
    gelu(v) = 0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3)))     (the tanh form)

The pair exists to measure what fusion saves: the fused kernel reads x once and writes y once
(the row stays in L1 between the statistics pass and the output pass); the chain writes and
re-reads two intermediate arrays and pays three launches.

Numba has no vectorised tanh on this platform (no SVML), so `_tanh` is a rational approximation
(odd degree-13 / even degree-6 polynomials on a clamped argument, the form Eigen uses for float
tanh); tests/kernels/test_norm.py bounds it against np.tanh (`TANH_APPROX_ABS_TOL`). Statistics use
float32 with fastmath reassociation (partial sums per SIMD lane), like any vectorised reduction.
For the same reason `exp32` (SiLU's and softmax's exp, activation.py and attention.py) is
Cephes' expf in arithmetic LLVM can vectorise: 2^n r's polynomial, 2^n put together as float32
bits; tests/kernels/test_norm.py bounds it against float64 exp (`EXP32_REL_TOL`).
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from harmony_ref.kernels._checks import check_last_dim, float32_array
from harmony_ref.kernels.matmul_x86 import (
    LANES,
    add_floats,
    add_squares,
    lane_sum,
    load_floats,
    zero_floats,
)

GELU_TANH_SCALE = np.float32(0.7978845608028654)  # sqrt(2 / pi) (0.797884...)
GELU_CUBIC = np.float32(0.044715)
# The rational form is fitted on [-7.905, 7.905]; past TANH_SATURATE tanh is +-1 in float32
# (1 - tanh(9) = 3e-8 < half an ulp of 1), returned exactly so that gelu(-big) is exactly 0.
TANH_CLAMP = np.float32(7.90531110763549805)
TANH_SATURATE = np.float32(9.0)
_TANH_NUM = (  # odd numerator coefficients a1, a3, ..., a13
    4.89352455891786e-03,
    6.37261928875436e-04,
    1.48572235717979e-05,
    5.12229709037114e-08,
    -8.60467152213735e-11,
    2.00018790482477e-13,
    -2.76076847742355e-16,
)
_TANH_DEN = (4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04, 1.19825839466702e-06)
A1, A3, A5, A7, A9, A11, A13 = (np.float32(c) for c in _TANH_NUM)
B0, B2, B4, B6 = (np.float32(c) for c in _TANH_DEN)


# ----------------------------------------------------------------------------------------------
# CPU code reference


def layer_norm_ref(x, gamma, beta, eps: float = 1e-5) -> np.ndarray:
    x, gamma, beta = _check(x, gamma=gamma, beta=beta)
    _check_stats(x, centred=True)
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + _eps(eps)) * gamma + beta


def bias_add_ref(x, bias) -> np.ndarray:
    x, bias = _check(x, bias=bias)
    return x + bias


def gelu_ref(x) -> np.ndarray:
    (x,) = _check(x)
    return np.float32(0.5) * x * (1 + np.tanh(GELU_TANH_SCALE * (x + GELU_CUBIC * x**3)))


def norm_bias_gelu_ref(x, gamma, beta, bias, eps: float = 1e-5) -> np.ndarray:
    return gelu_ref(bias_add_ref(layer_norm_ref(x, gamma, beta, eps), bias))


def _eps(eps) -> np.float32:
    """eps as the kernels' float32, or ValueError: 0 (or one that rounds to 0) made a zero row
    0 / 0 (the Numba kernels' ZeroDivisionError, NaN in the twins), a negative or NaN eps NaN."""
    e = np.float32(float(eps))
    if not (np.isfinite(e) and e > 0):
        raise ValueError(f"eps must be a finite number > 0 (as float32), got {eps!r}")
    return e


# A row's float32 statistics overflow past this (the kernels' running sums stay within a factor
# (1 + D ulp) of the exact sum, far below the 2x kept here).
STATS_MAX = float(np.finfo(np.float32).max) / 2


def _check_stats(x: np.ndarray, centred: bool) -> None:
    """ValueError naming the first row whose float32 statistics would overflow: its sum of
    squares (about the mean when `centred`, LayerNorm; RMSNorm's about 0) or, for LayerNorm, its
    sum. Past it the kernels returned NaN and the twins 0 (RMSNorm) or beta (LayerNorm) where
    float64 gives O(1) values. A row's sum of squares (centred or not) is at most D max|x|^2 and
    its sum D max|x|: within STATS_MAX no row needs the float64 pass."""
    top = float(np.abs(x).max()) if x.size else 0.0
    if x.shape[-1] * top * max(top, 1.0) <= STATS_MAX:
        return
    rows = x.reshape(-1, x.shape[-1]).astype(np.float64)
    if centred:
        sums = np.abs(rows).sum(axis=1)
        rows = rows - rows.mean(axis=1, keepdims=True)
    else:
        sums = np.zeros(rows.shape[0])
    squares = np.einsum("ij,ij->i", rows, rows)
    bad = (squares > STATS_MAX) | (sums > STATS_MAX)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"x row {i} (shape {x.shape}, max |x| {np.abs(rows[i]).max():.3g}): its float32 "
            "statistics (sum of squares) overflow; the norms compute in float32"
        )


def _check(x, **vectors):
    """x (..., D) and named D-length parameter vectors, all finite float -> float32 arrays."""
    x = float32_array(x, "x", (1, 2, 3, 4))
    out = [x]
    for name, v in vectors.items():
        v = float32_array(v, name, (1,))
        check_last_dim(x, "x", v.shape[0], f"len({name})")
        out.append(v)
    return out


# exp32: Cephes expf (x = n ln2 + r, |r| <= ln2 / 2, e^r a degree-7 polynomial, 2^n as float32
# bits). Past EXP_HI the result is inf, below EXP_LO 0 (float32's normal range: the subnormals
# below it, < 1.2e-38, are given as 0), NaN stays NaN.
EXP_HI = np.float32(88.3762626647949)  # 2^n stays a normal float32 (n <= 127)
EXP_LO = np.float32(-87.3365447505531)  # n >= -126
LOG2E = np.float32(1.44269504088896341)
LN2_HI = np.float32(0.693359375)  # ln 2 = LN2_HI + LN2_LO, LN2_HI with few bits: n LN2_HI exact
LN2_LO = np.float32(-2.12194440e-4)
E0, E1, E2, E3, E4, E5 = (
    np.float32(c)
    for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
              1.6666665459e-1, 5.0000001201e-1)
)  # fmt: skip


@intrinsic
def _bits_as_float32(typingctx, v):
    """int32 bits -> the float32 they spell (a bitcast LLVM keeps in vector registers)."""

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@numba.njit(inline="always")
def exp32(x):
    """e^x for float32 x, within EXP32_REL_TOL of float64 exp (tests/kernels/test_norm.py),
    branch-free so that a loop over it vectorises."""
    xc = x if x < EXP_HI else EXP_HI
    xc = xc if xc > EXP_LO else EXP_LO  # NaN -> EXP_HI here, put back below
    n = np.rint(xc * LOG2E)
    r = xc - n * LN2_HI - n * LN2_LO
    p = ((((E0 * r + E1) * r + E2) * r + E3) * r + E4) * r + E5
    y = (p * (r * r) + r + np.float32(1.0)) * _bits_as_float32((np.int32(n) + np.int32(127)) << 23)
    y = np.float32(np.inf) if x > EXP_HI else y
    y = np.float32(0.0) if x < EXP_LO else y
    return x if x != x else y


# ----------------------------------------------------------------------------------------------
# Fast path. Kernels work on (R, D) rows; the wrappers reshape (..., D) to that.


@numba.njit(inline="always", fastmath=True)
def _tanh(v0):
    v = min(max(v0, -TANH_CLAMP), TANH_CLAMP)
    v2 = v * v
    num = v * (A1 + v2 * (A3 + v2 * (A5 + v2 * (A7 + v2 * (A9 + v2 * (A11 + v2 * A13))))))
    den = B0 + v2 * (B2 + v2 * (B4 + v2 * B6))
    r = num / den
    one = np.float32(1.0)
    r = one if v0 > TANH_SATURATE else r
    return -one if v0 < -TANH_SATURATE else r


@numba.njit(inline="always", fastmath=True)
def _gelu1(v):
    return (
        np.float32(0.5)
        * v
        * (np.float32(1.0) + _tanh(GELU_TANH_SCALE * (v + GELU_CUBIC * v * v * v)))
    )


@numba.njit(inline="always", fastmath=True)
def _row_stats(x, i, eps):
    d = x.shape[1]
    total = np.float32(0.0)
    for j in range(d):
        total += x[i, j]
    mean = total / np.float32(d)
    sq = np.float32(0.0)
    for j in range(d):
        c = x[i, j] - mean
        sq += c * c
    return mean, np.float32(1.0) / np.sqrt(sq / np.float32(d) + eps)


@numba.njit(parallel=True, fastmath=True, cache=True)
def _norm_bias_gelu_rows(x, gamma, shift, eps):
    rows, d = x.shape
    y = np.empty_like(x)
    for i in numba.prange(rows):
        mean, rstd = _row_stats(x, i, eps)
        for j in range(d):
            y[i, j] = _gelu1((x[i, j] - mean) * rstd * gamma[j] + shift[j])
    return y


@numba.njit(parallel=True, fastmath=True, cache=True)
def _layer_norm_rows(x, gamma, beta, eps):
    rows, d = x.shape
    y = np.empty_like(x)
    for i in numba.prange(rows):
        mean, rstd = _row_stats(x, i, eps)
        for j in range(d):
            y[i, j] = (x[i, j] - mean) * rstd * gamma[j] + beta[j]
    return y


@numba.njit(parallel=True, fastmath=True, cache=True)
def _bias_add_rows(x, bias):
    rows, d = x.shape
    y = np.empty_like(x)
    for i in numba.prange(rows):
        for j in range(d):
            y[i, j] = x[i, j] + bias[j]
    return y


@numba.njit(parallel=True, fastmath=True, cache=True)
def _gelu_rows(x):
    rows, d = x.shape
    y = np.empty_like(x)
    for i in numba.prange(rows):
        for j in range(d):
            y[i, j] = _gelu1(x[i, j])
    return y


def _rows(x: np.ndarray) -> np.ndarray:
    return x.reshape(-1, x.shape[-1])


def norm_bias_gelu(x, gamma, beta, bias, eps: float = 1e-5) -> np.ndarray:
    """Fused gelu(layer_norm(x) + bias) over the last axis: x (..., D) -> float32 (..., D)."""
    x, gamma, beta, bias = _check(x, gamma=gamma, beta=beta, bias=bias)
    _check_stats(x, centred=True)
    shift = beta + bias  # (D,): one vector stream instead of two in the inner loop
    return _norm_bias_gelu_rows(_rows(x), gamma, shift, _eps(eps)).reshape(x.shape)


def layer_norm(x, gamma, beta, eps: float = 1e-5) -> np.ndarray:
    x, gamma, beta = _check(x, gamma=gamma, beta=beta)
    _check_stats(x, centred=True)
    return _layer_norm_rows(_rows(x), gamma, beta, _eps(eps)).reshape(x.shape)


def bias_add(x, bias) -> np.ndarray:
    x, bias = _check(x, bias=bias)
    return _bias_add_rows(_rows(x), bias).reshape(x.shape)


def gelu(x) -> np.ndarray:
    (x,) = _check(x)
    return _gelu_rows(_rows(x)).reshape(x.shape)


def tanh_approx(v) -> np.ndarray:
    """The kernels' tanh on a float32 array (exposed so tests can bound it against np.tanh)."""
    v = float32_array(v, "v", (1,))
    return _tanh_vec(v)


def exp_approx(v) -> np.ndarray:
    """The kernels' exp (`exp32`) on float32 values, non-finite ones included (exposed so tests
    can bound it against float64 exp)."""
    return _exp_vec(np.ascontiguousarray(v, dtype=np.float32).ravel())


@numba.njit(cache=True, error_model="numpy")
def _exp_vec(v):
    out = np.empty_like(v)
    for i in range(v.size):
        out[i] = exp32(v[i])
    return out


@numba.njit(cache=True, fastmath=True)
def _tanh_vec(v):
    out = np.empty_like(v)
    for i in range(v.shape[0]):
        out[i] = _tanh(v[i])
    return out


# ----------------------------------------------------------------------------------------------
# RMSNorm (Llama): y = x / sqrt(mean(x^2) + eps) * weight over the last axis, optionally after
# a residual add (x += delta first: the decoder's "add the sublayer output, normalise for the
# next one" in one pass). Statistics in float32 like Hugging Face's LlamaRMSNorm.


def rms_norm_ref(x, weight, eps: float = 1e-5) -> np.ndarray:
    x, weight = _check(x, weight=weight)
    _check_stats(x, centred=False)
    ms = (x * x).mean(axis=-1, keepdims=True)  # (..., 1)
    return x / np.sqrt(ms + _eps(eps)) * weight


def add_rms_norm_ref(x, delta, weight, eps: float = 1e-5):
    """(x + delta, rms_norm(x + delta)): the new residual stream and its normalised copy."""
    x, delta, weight = _check_add(x, delta, weight)
    s = x + delta
    return s, rms_norm_ref(s, weight, eps)


# Each row op comes twice: a serial loop (`rms_norm_rows`, ...) for decode's one row, where a
# parallel launch (2.5 us) costs more than the work, and a `_par` prange over the rows for
# prefill (the runtime picks it at PARALLEL_MIN_ROWS rows and more), so that the second thread
# has its share of the ops between the GEMMs. Both loops run the same inlined row body: the
# results are the same bits (tests/kernels/test_rms_norm.py), the twin is the same `_ref`.
PARALLEL_MIN_ROWS = 4


# A row's sum of squares in one fixed order: four float32 vectors of LANES running sums (vector
# v takes blocks v, v + 4, ... of LANES elements; blocks past the last four go to vector 0), the
# vectors then their lanes added pairwise, the tail after them in order; vector arithmetic
# without fast-math flags (matmul_x86's add_squares / add_floats / lane_sum), so LLVM may not
# reorder it. And the output pass (x * r) * w without reassociation either (`_scale_row`). So the
# serial loop and the prange loop that inline a row body get the same bits, on every target
# alike. With fastmath's reduction (before), LLVM vectorised each loop its own way on some
# targets: up to 7 ulp apart under emulated baseline x86-64, 2 under Haswell / Zen 3
# (tests/kernels/test_prefill_rows.py). Rows are C-contiguous (the callers' arrays).
@numba.njit(cache=True)  # not inline="always": inlined, it would take its caller's fastmath
def _fixed_sum(x, i, start, n, squares):
    """sum of x[i, start + j] over j < n (of its squares when `squares`), float32, in the fixed
    order above. Also attention's softmax totals (squares False): with a fastmath reduction
    there, Numba's cached kernel and the same code compiled in the process summed in other
    orders (kernels/attention.py `_exp_scores`)."""
    base = i * x.shape[1] + start
    quad = n - n % (4 * LANES)
    acc0 = acc1 = acc2 = acc3 = zero_floats()
    for j in range(0, quad, 4 * LANES):
        acc0 = _add_lanes(acc0, load_floats(x, base + j), squares)
        acc1 = _add_lanes(acc1, load_floats(x, base + j + LANES), squares)
        acc2 = _add_lanes(acc2, load_floats(x, base + j + 2 * LANES), squares)
        acc3 = _add_lanes(acc3, load_floats(x, base + j + 3 * LANES), squares)
    body = n - n % LANES
    for j in range(quad, body, LANES):
        acc0 = _add_lanes(acc0, load_floats(x, base + j), squares)
    total = lane_sum(add_floats(add_floats(acc0, acc1), add_floats(acc2, acc3)))
    for j in range(start + body, start + n):
        total += x[i, j] * x[i, j] if squares else x[i, j]
    return total


@numba.njit(inline="always")
def _add_lanes(acc, v, squares):
    return add_squares(acc, v) if squares else add_floats(acc, v)


@numba.njit(cache=True)
def _scale_row(x, i, start, n, r, weight, out):
    """out[i, start + j] = (x[i, start + j] * r) * weight[j], in that order (no fastmath)."""
    for j in range(n):
        out[i, start + j] = (x[i, start + j] * r) * weight[j]


@numba.njit(inline="always", fastmath=True)
def _rms_norm_row(x, i, weight, eps, out):
    d = x.shape[1]
    sq = _fixed_sum(x, i, 0, d, True)
    r = np.float32(1.0) / np.sqrt(sq / np.float32(d) + eps)
    _scale_row(x, i, 0, d, r, weight, out)


@numba.njit(inline="always", fastmath=True)
def _add_rms_norm_row(x, delta, i, weight, eps, out):
    d = x.shape[1]
    for j in range(d):
        x[i, j] += delta[i, j]
    sq = _fixed_sum(x, i, 0, d, True)
    r = np.float32(1.0) / np.sqrt(sq / np.float32(d) + eps)
    _scale_row(x, i, 0, d, r, weight, out)


@numba.njit(fastmath=True, cache=True)
def rms_norm_rows(x, weight, eps, out):
    """out (R, D) = rms_norm(x (R, D)). No checks: callers validate shapes once (runtime)."""
    for i in range(x.shape[0]):
        _rms_norm_row(x, i, weight, eps, out)
    return out


@numba.njit(parallel=True, fastmath=True, cache=True)
def rms_norm_rows_par(x, weight, eps, out):
    """`rms_norm_rows` with its rows split between threads (prefill)."""
    for i in numba.prange(x.shape[0]):
        _rms_norm_row(x, i, weight, eps, out)
    return out


@numba.njit(fastmath=True, cache=True)
def add_rms_norm_rows(x, delta, weight, eps, out):
    """x (R, D) += delta in place, then out = rms_norm(x). No checks (see rms_norm_rows)."""
    for i in range(x.shape[0]):
        _add_rms_norm_row(x, delta, i, weight, eps, out)
    return out


@numba.njit(parallel=True, fastmath=True, cache=True)
def add_rms_norm_rows_par(x, delta, weight, eps, out):
    """`add_rms_norm_rows` with its rows split between threads (prefill)."""
    for i in numba.prange(x.shape[0]):
        _add_rms_norm_row(x, delta, i, weight, eps, out)
    return out


def _check_add(x, delta, weight):
    x, weight = _check(x, weight=weight)
    delta = float32_array(delta, "delta", (1, 2, 3, 4))
    if delta.shape != x.shape:
        raise ValueError(f"delta has shape {delta.shape}, x has {x.shape}")
    return x, delta, weight


def rms_norm(x, weight, eps: float = 1e-5) -> np.ndarray:
    """RMSNorm over the last axis: x (..., D) -> float32 (..., D)."""
    x, weight = _check(x, weight=weight)
    _check_stats(x, centred=False)
    rows = _rows(x)
    return rms_norm_rows(rows, weight, _eps(eps), np.empty_like(rows)).reshape(x.shape)


def add_rms_norm(x, delta, weight, eps: float = 1e-5):
    """(x + delta, rms_norm(x + delta)) in one pass; the inputs are not modified."""
    x, delta, weight = _check_add(x, delta, weight)
    _check_stats(x.astype(np.float64) + delta, centred=False)
    s = _rows(x).copy()
    out = add_rms_norm_rows(s, _rows(delta), weight, _eps(eps), np.empty_like(s))
    return s.reshape(x.shape), out.reshape(x.shape)


# ----------------------------------------------------------------------------------------------
# RMSNorm over each attention head (Qwen3's and Gemma 3's q_norm / k_norm): every head_dim slice
# of q and k is normalised with one (head_dim,) weight shared by all heads, before RoPE.


def rms_norm_heads_ref(x, weight, eps: float = 1e-6) -> np.ndarray:
    """x (T, H, hd) -> rms_norm over the last axis with weight (hd,), float32 (T, H, hd)."""
    x = float32_array(x, "x", (3,))
    return rms_norm_ref(x, weight, eps)


@numba.njit(inline="always", fastmath=True)
def _rms_norm_head(x, t, h, head_dim, weight, eps):
    base = h * head_dim
    sq = _fixed_sum(x, t, base, head_dim, True)
    r = np.float32(1.0) / np.sqrt(sq / np.float32(head_dim) + eps)
    _scale_row(x, t, base, head_dim, r, weight, x)


@numba.njit(fastmath=True, cache=True)
def rms_norm_heads_rows(x, first_head, n_heads, head_dim, weight, eps):
    """Normalise heads first_head .. first_head + n_heads - 1 of every row of x (T, W) in place
    (the fused q|k|v row: q's heads then k's). No checks (callers validate once)."""
    for t in range(x.shape[0]):
        for h in range(first_head, first_head + n_heads):
            _rms_norm_head(x, t, h, head_dim, weight, eps)
    return x


@numba.njit(parallel=True, fastmath=True, cache=True)
def rms_norm_heads_rows_par(x, first_head, n_heads, head_dim, weight, eps):
    """`rms_norm_heads_rows` with its rows split between threads (prefill)."""
    for t in numba.prange(x.shape[0]):
        for h in range(first_head, first_head + n_heads):
            _rms_norm_head(x, t, h, head_dim, weight, eps)
    return x


def rms_norm_heads(x, weight, eps: float = 1e-6) -> np.ndarray:
    """Kernel version of `rms_norm_heads_ref` (returns a new array)."""
    x = float32_array(x, "x", (3,))
    weight = float32_array(weight, "weight", (1,))
    check_last_dim(x, "x", weight.shape[0], "len(weight)")
    _check_stats(x, centred=False)
    t, h, hd = x.shape
    y = x.reshape(t, h * hd).copy()
    return rms_norm_heads_rows(y, 0, h, hd, weight, _eps(eps)).reshape(x.shape)
