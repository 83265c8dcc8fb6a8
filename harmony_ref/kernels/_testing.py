"""Comparison helper for kernel tests and benchmarks: on failure it names the first bad index,
the reference value, the kernel's value and the largest difference (llm.c's validate_result)."""

from __future__ import annotations

import numpy as np


def assert_within(got, ref, bound, what: str) -> None:
    """|got - ref| <= bound elementwise (bound broadcast), and got finite wherever ref is."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        raise AssertionError(f"{what}: shape {got.shape} != reference shape {ref.shape}")
    err = np.abs(got - ref)
    bad = ~(err <= np.broadcast_to(bound, err.shape))  # NaN counts as bad
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        b = np.broadcast_to(bound, err.shape)[idx]
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.size} values off; first at {list(idx)}: "
            f"ref {ref[idx]!r} got {got[idx]!r} |diff| {err[idx]:.3g} > bound {b:.3g}; "
            f"max |diff| {np.nanmax(err):.3g}"
        )
