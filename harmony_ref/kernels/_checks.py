"""Input checks shared by the kernels: every error says which argument, its shape and dtype, and
for non-finite values the first bad index, so a failure deep in a model run is readable."""

from __future__ import annotations

import numpy as np

from harmony_ref.quant._checks import check_cast_range


def float32_array(a, name: str, ndims: tuple[int, ...]) -> np.ndarray:
    """`a` as a C-contiguous float32 array with one of `ndims` dimensions, all values finite."""
    a = np.asarray(a)
    if a.dtype.type not in (np.float16, np.float32, np.float64):
        raise ValueError(
            f"{name} has dtype {a.dtype} (shape {a.shape}); expected float16, float32 or float64"
        )
    if a.ndim not in ndims:
        raise ValueError(
            f"{name} must have {' or '.join(map(str, ndims))} dims, got shape {a.shape}"
        )
    if a.size == 0:
        raise ValueError(f"{name} is empty: shape {a.shape}")
    finite = np.isfinite(a)
    if not finite.all():
        idx = tuple(int(i) for i in np.argwhere(~finite)[0])
        raise ValueError(f"{name}{list(idx)} = {a[idx]} is not finite (shape {a.shape})")
    with np.errstate(over="ignore"):
        a32 = np.ascontiguousarray(a, dtype=np.float32)
    if a.dtype.type is np.float64:  # a finite float64 past float32's range casts to inf
        check_cast_range(a, a32, name)
    return a32


def check_last_dim(a: np.ndarray, name: str, expected: int, what: str) -> None:
    if a.shape[-1] != expected:
        raise ValueError(
            f"{name} has shape {a.shape}: last dim {a.shape[-1]} does not match {what} = {expected}"
        )
