"""Rotary position embeddings (RoPE) in Hugging Face's rotate-half layout, with a NumPy twin.

    cos, sin = rope_table(max_positions, head_dim, theta)     (P, hd / 2) float32 each
    y = rope(x, positions, theta)                              x (T, H, hd) -> (T, H, hd)

For a head vector v at position p and j < hd / 2, with angle a = p * theta^(-2j / hd):
    y[j]          = v[j] cos a - v[j + hd/2] sin a
    y[j + hd/2]   = v[j + hd/2] cos a + v[j] sin a
Angles are computed in float64 and rounded once to float32 (cos/sin tables), so the kernel and
the reference share the same table and differ only by float32 rounding order (none: the same
two products and one add per element).

`rope_rows` is the decoder's hot path: it rotates the first `n_rot` heads of each row of a fused
q|k|v activation (T, (H + 2 Hkv) hd) in place (q's H heads then k's Hkv heads are contiguous);
`rope_rows_par` is the same loop with its rows split between threads, for prefill.
"""

from __future__ import annotations

import numba
import numpy as np

from harmony_ref.kernels._checks import float32_array


def rope_table(max_positions: int, head_dim: int, theta: float):
    """cos, sin (max_positions, head_dim / 2) float32 of angle p * theta^(-2j / head_dim)."""
    return _cos_sin(np.arange(max_positions, dtype=np.float64), head_dim, theta)


def _cos_sin(positions: np.ndarray, head_dim: int, theta: float):
    """Rows of `rope_table` at `positions` (float64), computed for those rows only."""
    if head_dim % 2 or head_dim <= 0:
        raise ValueError(f"head_dim must be positive and even, got {head_dim}")
    if not (theta > 0 and np.isfinite(theta)):
        raise ValueError(f"rope theta must be a positive number, got {theta}")
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)  # (hd/2,)
    angles = positions[:, None] * inv_freq  # (P, hd/2)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _check(x, positions, theta):
    x = float32_array(x, "x", (3,))
    positions = np.asarray(positions)
    if positions.shape != (x.shape[0],) or positions.dtype.kind not in "iu":
        raise ValueError(
            f"positions must be {x.shape[0]} integers (one per row of x "
            f"{x.shape}), got {positions.dtype} {positions.shape}"
        )
    if (positions < 0).any():
        raise ValueError(f"positions must be >= 0, got min {positions.min()}")
    if x.shape[2] % 2:
        raise ValueError(f"x has head_dim {x.shape[2]}: must be even")
    # the table's rows at these positions only: a table up to max(positions) took memory in
    # the largest position (position 2**31 - 1: a 64 GiB allocation)
    cos, sin = _cos_sin(positions.astype(np.float64), x.shape[2], theta)
    return x, cos, sin


def rope_ref(x, positions, theta: float) -> np.ndarray:
    """x (T, H, hd) float, positions (T,) int -> rotated float32 (T, H, hd)."""
    x, cos, sin = _check(x, positions, theta)
    half = x.shape[2] // 2
    c, s = cos[:, None, :], sin[:, None, :]  # (T, 1, hd/2)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1).astype(np.float32)


@numba.njit(inline="always")
def _rope_row(x, t, n_rot, head_dim, cos, sin):
    half = head_dim // 2
    for h in range(n_rot):
        base = h * head_dim
        for j in range(half):
            c = cos[t, j]
            s = sin[t, j]
            a = x[t, base + j]
            b = x[t, base + half + j]
            x[t, base + j] = a * c - b * s
            x[t, base + half + j] = b * c + a * s


@numba.njit(cache=True)
def rope_rows(x, n_rot, head_dim, cos, sin):
    """Rotate heads 0..n_rot-1 of every row of x (T, W >= n_rot * hd) in place; cos/sin (T, hd/2)
    are the rows of the table at each row's position. No checks (callers validate once)."""
    for t in range(x.shape[0]):
        _rope_row(x, t, n_rot, head_dim, cos, sin)
    return x


@numba.njit(parallel=True, cache=True)
def rope_rows_par(x, n_rot, head_dim, cos, sin):
    """`rope_rows` with its rows split between threads (prefill; the same bits)."""
    for t in numba.prange(x.shape[0]):
        _rope_row(x, t, n_rot, head_dim, cos, sin)
    return x


def rope(x, positions, theta: float) -> np.ndarray:
    """Kernel version of `rope_ref` (returns a new array)."""
    x, cos, sin = _check(x, positions, theta)
    t, h, hd = x.shape
    y = x.reshape(t, h * hd).copy()
    return rope_rows(y, h, hd, np.ascontiguousarray(cos), np.ascontiguousarray(sin)).reshape(
        x.shape
    )
