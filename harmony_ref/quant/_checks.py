"""Input checks shared by the quantizers: every error names the shape, the group size or the
first bad index, because "ValueError: bad input" on a 7B checkpoint helps nobody."""

from __future__ import annotations

import numpy as np

ACCEPTED_DTYPES = (np.float16, np.float32, np.float64)


def as_float32_matrix(w, what: str = "w") -> np.ndarray:
    """Return `w` as a C-contiguous float32 (N, K) array, or raise ValueError saying why not."""
    w = np.asarray(w)
    if w.ndim != 2:
        raise ValueError(f"{what} must be a 2-D (N, K) matrix, got shape {w.shape}")
    if w.dtype.type not in ACCEPTED_DTYPES:
        raise ValueError(
            f"{what} has unsupported dtype {w.dtype} (shape {w.shape}); "
            "expected float16, float32 or float64"
        )
    if w.shape[0] == 0 or w.shape[1] == 0:
        raise ValueError(f"{what} is empty: shape {w.shape}")
    finite = np.isfinite(w)
    if not finite.all():
        i, k = np.argwhere(~finite)[0]
        raise ValueError(
            f"{what}[{i}, {k}] = {w[i, k]} is not finite (shape {w.shape}); "
            "quantizing NaN or Inf would poison its whole group"
        )
    with np.errstate(over="ignore"):
        w32 = np.ascontiguousarray(w, dtype=np.float32)
    if w.dtype.type is np.float64:  # a finite float64 past float32's range casts to inf
        check_cast_range(w, w32, what)
    return w32


def check_cast_range(a: np.ndarray, cast: np.ndarray, name: str) -> None:
    """Every finite value of `a` stayed finite in `cast` (a rounded to float32, or float16), or
    ValueError naming the first that did not: a finite float64 past float32's range (|a| > 3.4e38;
    past 65504 for float16) would otherwise go on as inf (NaN out, or a non-finite scale)."""
    over = np.isinf(cast) & np.isfinite(a)
    if over.any():
        idx = tuple(int(i) for i in np.argwhere(over)[0])
        raise ValueError(
            f"{name}{list(idx)} = {a[idx]} overflows {cast.dtype} "
            f"(|x| > {float(np.finfo(cast.dtype).max):.5g}; shape {a.shape})"
        )
