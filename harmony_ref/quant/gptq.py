"""GPTQ (Frantar et al. 2022): weights quantized column by column, each column's rounding error
spread over the columns not yet quantized through the inverse Hessian of the layer's own inputs,
so the layer's *output* on calibration data moves as little as a greedy order allows. It writes
the same stored formats as round-to-nearest (Int4Tensor, Int8Tensor): only the codes, scales and
zero points differ, so nothing downstream changes.

    h = hessian(x)                                   # 2 X^T X / n over calibration tokens (K, K)
    r = gptq_quantize(w, h, parse_format("int4-g128"))   # r.stored: an Int4Tensor
    r = gptq_quantize_ref(w, h, fmt)                 # the slow reference: the same result

The loss of a row w (1, K) changed to w' is (w' - w) H (w' - w)^T, H = 2 X^T X (the layer output
error on the calibration inputs X, (n, K)). With the columns Q already quantized and F the rest,
the best F given Q is e_F = -e_Q H_QF H_FF^-1 (e = w' - w): the Optimal Brain Surgeon update.
`gptq_quantize_ref` does exactly that, one column at a time: solve for the free columns, quantize
the next one at its updated value, fix it. `gptq_quantize` is the paper's algorithm for the same
result: H^-1 once (its upper Cholesky factor U, H^-1 = U^T U, whose rows give every step's update
at once), errors of a block of `block_size` columns applied to the columns after it in one matmul
("lazy batch" updates). Tests hold the two equal on tiny matrices (float64), and GPTQ's output
error on the calibration inputs never above round-to-nearest's.

Choices, as the paper's reference code makes them:
- Dampening: H + damp x mean(diag H) x I (damp = 0.01), so H^-1 exists with fewer tokens than K.
  A column no token ever touched (diag 0) is quantized from 0 and takes no update.
- INT4 groups: a group's scale and zero point are fitted when its first column is reached, on
  the group's columns as updated so far (the recipe's min/max rule and stored float16 scale,
  quant/int4.py), so later groups absorb earlier errors. INT8: one scale per row from the row
  as read (max|w| / 127), as RTN.
- act_order: columns in order of decreasing diag(H) (the most-used input first). The stored
  format's groups are contiguous in K, so with act_order every group's scale and zero point are
  fitted up front on the weights as read (the reference code's `static_groups`).
- Arithmetic: H, its inverse and Cholesky factor in float64; the weights in float32 (the
  reference code's float32), float64 on request (`dtype`, the tests').
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harmony_ref.quant._checks import as_float32_matrix
from harmony_ref.quant.int4 import (
    INT4_MAX,
    INT4_MIN,
    SYM_MAX_LEVEL,
    Int4Tensor,
    _group_params,
    dequantize_int4,
)
from harmony_ref.quant.int8 import INT8_MAX_LEVEL, Int8Tensor, quantize_int8_ref
from harmony_ref.quant.policy import WeightFormat

DEFAULT_DAMP = 0.01
DEFAULT_BLOCK = 128


def hessian(x, h: np.ndarray | None = None, n: int = 0) -> tuple[np.ndarray, int]:
    """(2 X^T X / n, n) over the rows of x (..., K), float64, added into a running (h, n)."""
    x = np.asarray(x, dtype=np.float64).reshape(-1, np.shape(x)[-1])
    if not np.isfinite(x).all():
        raise ValueError("calibration inputs contain NaN/Inf")
    m = x.shape[0]
    g = 2.0 * (x.T @ x)
    if h is None or n == 0:
        return g / max(m, 1), m
    return (h * n + g) / (n + m), n + m


@dataclass(frozen=True)
class GPTQResult:
    stored: Int4Tensor | Int8Tensor
    dequantized: np.ndarray  # (N, K) float32: what the stored tensor dequantizes to
    loss: float  # sum over rows of (w' - w) H (w' - w)^T with the undamped H


class _Grid:
    """Per-row quantization grid of one format: fitted per group (INT4) or per row (INT8), as
    the format's scale layout says."""

    def __init__(self, fmt: WeightFormat, w0: np.ndarray):
        self.fmt, self.n, self.k = fmt, w0.shape[0], w0.shape[1]
        self.per_row = not fmt.facts.grouped
        if self.per_row:
            t = quantize_int8_ref(w0)
            self.scale_f32 = t.scale.astype(np.float64)[:, None]  # (N, 1)
            self.int8_scale = t.scale
        else:
            g = fmt.group_size
            self.groups = self.k // g
            self.scale = np.empty((self.n, self.groups), np.float16)
            self.scale_f32 = np.zeros((self.n, self.groups), np.float64)
            self.zp = np.zeros((self.n, self.groups), np.int8) if fmt.scheme == "asym" else None
        self.q = np.zeros((self.n, self.k), np.int8)

    def fit_group(self, gi: int, cols: np.ndarray) -> None:
        """Fit group gi's scale and zero point on its (N, g) columns (the recipe's rule)."""
        c = cols.astype(np.float32)
        s, s32, zp = _group_params(
            c.min(axis=1, keepdims=True),
            c.max(axis=1, keepdims=True),
            self.fmt.scheme,
            np.float16,
            self.fmt.group_size,
        )
        self.scale[:, gi] = s[:, 0]
        self.scale_f32[:, gi] = s32[:, 0]
        if zp is not None:
            self.zp[:, gi] = zp[:, 0]

    def quantize(self, j: int, col: np.ndarray) -> np.ndarray:
        """Column j (N,) -> its dequantized value, codes kept; the float32 ops of quant/int4.py."""
        col32 = col.astype(np.float32)
        if self.per_row:
            s = self.int8_scale
            safe = np.where(s == 0, np.float32(1), s)
            q = np.clip(np.rint(col32 / safe), -INT8_MAX_LEVEL, INT8_MAX_LEVEL)
            self.q[:, j] = q.astype(np.int8)
            return (q.astype(np.float32) * s).astype(col.dtype)
        gi = j // self.fmt.group_size
        s = self.scale_f32[:, gi].astype(np.float32)
        safe = np.where(s == 0, np.float32(1), s)
        if self.zp is not None:
            zp = self.zp[:, gi].astype(np.float32)
            q = np.clip(np.rint(col32 / safe + zp), INT4_MIN, INT4_MAX)
            deq = (q - zp) * s
        else:
            q = np.clip(np.rint(col32 / safe), -SYM_MAX_LEVEL, SYM_MAX_LEVEL)
            deq = q * s
        self.q[:, j] = q.astype(np.int8)
        return deq.astype(col.dtype)

    def stored(self):
        if self.per_row:
            return Int8Tensor(self.q.copy(), self.int8_scale.copy(), (self.n, self.k))
        high = (self.q[:, 0::2] & 0x0F).astype(np.uint8)
        low = (self.q[:, 1::2] & 0x0F).astype(np.uint8)
        return Int4Tensor(
            (high << 4) | low,
            self.scale.copy(),
            None if self.zp is None else self.zp.copy(),
            (self.n, self.k),
            int(self.fmt.group_size),
            self.fmt.scheme,
        )


def _check(w, h, fmt: WeightFormat, damp: float):
    w = as_float32_matrix(w)
    n, k = w.shape
    h = np.asarray(h, dtype=np.float64)
    if h.shape != (k, k):
        raise ValueError(
            f"hessian has shape {h.shape}, expected ({k}, {k}) for w of shape {w.shape}"
        )
    if not np.isfinite(h).all():
        raise ValueError("hessian contains NaN/Inf")
    if not fmt.facts.fitted:
        raise ValueError(f"GPTQ quantizes to int4-gNN or int8, not {fmt.name}")
    if fmt.facts.grouped and (k % fmt.group_size or k % 2):
        raise ValueError(
            f"K = {k} (shape {w.shape}) is not a multiple of group_size = "
            f"{fmt.group_size} (and even)"
        )
    if not (isinstance(damp, (int, float)) and 0 < damp < 1):
        raise ValueError(f"damp = {damp!r}: must be a number in (0, 1)")
    return w, h


def _prepare(w, h, damp: float):
    """Dead columns zeroed, H dampened: (w float64 copy, H damped, dead mask)."""
    h = h.copy()
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    w = w.astype(np.float64)
    w[:, dead] = 0.0
    h[np.diag_indices_from(h)] += damp * float(np.mean(np.diag(h)))
    return w, h, dead


def _order(h: np.ndarray, act_order: bool) -> np.ndarray:
    return np.argsort(-np.diag(h), kind="stable") if act_order else np.arange(h.shape[0])


def _inverse_upper_factor(h: np.ndarray) -> np.ndarray:
    """U upper with h^-1 = U^T U, from one Cholesky and one triangular inverse: with J the
    reversal, J h J = L L^T gives h^-1 = (J L^-1 J)^T (J L^-1 J) and J L^-1 J is upper."""
    from scipy.linalg import lapack

    lower = np.linalg.cholesky(h[::-1, ::-1])
    linv, info = lapack.dtrtri(lower, lower=1)
    if info != 0:
        raise ValueError(f"hessian is singular after dampening (LAPACK dtrtri info {info})")
    return np.ascontiguousarray(linv[::-1, ::-1])


def _loss(w0, deq, h) -> float:
    e = deq.astype(np.float64) - w0.astype(np.float64)
    return float(((e @ h) * e).sum())


def gptq_quantize(
    w,
    h,
    fmt: WeightFormat,
    damp: float = DEFAULT_DAMP,
    block_size: int = DEFAULT_BLOCK,
    act_order: bool = False,
    dtype=np.float32,
) -> GPTQResult:
    """GPTQ of w (N, K) on hessian h (K, K) into `fmt` (see the module doc)."""
    w_in, h_in = _check(w, h, fmt, damp)
    if not (isinstance(block_size, (int, np.integer)) and block_size > 0):
        raise ValueError(f"block_size = {block_size!r}: must be a positive integer")
    w64, hd, dead = _prepare(w_in, h_in, damp)
    n, k = w64.shape
    perm = _order(h_in, act_order)
    grid = _Grid(fmt, w_in)
    g = fmt.group_size or 0  # 0: a per-row scale
    if g and act_order:  # static groups: fitted on the weights as read
        for gi in range(k // g):
            grid.fit_group(gi, w64[:, gi * g : (gi + 1) * g])
    if g and not act_order and block_size % g:
        block_size = g * max(1, block_size // g)  # a group never straddles two blocks
    u = _inverse_upper_factor(hd[np.ix_(perm, perm)])
    wp = np.ascontiguousarray(w64[:, perm], dtype=dtype)
    u = u.astype(dtype)
    for i1 in range(0, k, block_size):
        i2 = min(i1 + block_size, k)
        w1 = wp[:, i1:i2].copy()
        err = np.zeros_like(w1)
        u1 = u[i1:i2, i1:i2]
        for i in range(i2 - i1):
            j = int(perm[i1 + i])
            if g and not act_order and j % g == 0:
                grid.fit_group(j // g, w1[:, i : i + g])
            col = w1[:, i]
            d = grid.quantize(j, col)
            e = (col - d) / u1[i, i]
            w1[:, i:] -= np.outer(e, u1[i, i:])
            err[:, i] = e
        wp[:, i2:] -= err @ u[i1:i2, i2:]
    stored = grid.stored()
    deq32 = _dequantize(stored)
    return GPTQResult(stored, deq32, _loss(w_in, deq32, h_in))


def _dequantize(stored) -> np.ndarray:
    if isinstance(stored, Int8Tensor):
        return stored.values.astype(np.float32) * stored.scale[:, None]
    return dequantize_int4(stored)


def gptq_quantize_ref(
    w, h, fmt: WeightFormat, damp: float = DEFAULT_DAMP, act_order: bool = False
) -> GPTQResult:
    """The slow reference from the paper's equations: before each column, the not yet quantized
    columns are re-solved from scratch (e_F = -e_Q H_QF H_FF^-1, float64), then the column is
    quantized at its updated value and fixed. O(K^4): tiny matrices only."""
    w_in, h_in = _check(w, h, fmt, damp)
    w64, hd, _ = _prepare(w_in, h_in, damp)
    n, k = w64.shape
    order = _order(h_in, act_order)
    grid = _Grid(fmt, w_in)
    g = fmt.group_size or 0  # 0: a per-row scale
    if g and act_order:
        for gi in range(k // g):
            grid.fit_group(gi, w64[:, gi * g : (gi + 1) * g])
    fixed = np.zeros(k, bool)
    e = np.zeros_like(w64)  # e[:, fixed] = quantized - original

    def current():
        free = ~fixed
        cur = w64.copy()
        if fixed.any():
            rhs = e[:, fixed] @ hd[np.ix_(fixed, free)]  # (N, |F|)
            cur[:, free] -= np.linalg.solve(hd[np.ix_(free, free)], rhs.T).T
        cur[:, fixed] = w64[:, fixed] + e[:, fixed]
        return cur

    for j in order:
        j = int(j)
        cur = current()
        if g and not act_order and j % g == 0:
            grid.fit_group(j // g, cur[:, j : j + g])
        d = grid.quantize(j, cur[:, j])
        e[:, j] = d - w64[:, j]
        fixed[j] = True
    stored = grid.stored()
    deq32 = _dequantize(stored)
    return GPTQResult(stored, deq32, _loss(w_in, deq32, h_in))


def output_error(w, deq, x) -> float:
    """||X (W' - W)^T||_F^2: the layer output error on inputs x (n, K)."""
    d = np.asarray(deq, np.float64) - np.asarray(w, np.float64)
    y = np.asarray(x, np.float64).reshape(-1, d.shape[1]) @ d.T
    return float((y * y).sum())
