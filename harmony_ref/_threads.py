"""Thread counts of the two pools a host measurement runs on: Numba's (the kernels) and OpenBLAS's
(NumPy's float matmuls), set together, in one place.

    note = set_threads(1)            # "OpenBLAS threads = 1 (...)": what was done, for provenance
    with pinned_threads(1): ...      # the same for a block, restored afterwards

On a shared machine a multi-threaded call stalls for a whole scheduler slice (~4-16 ms) whenever
one of its threads is preempted, which is why host measurements default to one thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

_BLAS_SETTERS = (
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads_64_",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)


def set_blas_threads(n: int) -> str:
    """Set the thread count of the OpenBLAS NumPy loaded (what threadpoolctl does, by ctypes).
    Returns what was done."""
    import numpy  # noqa: F401  (loads the BLAS)

    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "openblas" in line and ".so" in line})
    except OSError:
        return "BLAS threads unchanged (no /proc/self/maps)"
    for path in paths:
        lib = ctypes.CDLL(path)
        for sym in _BLAS_SETTERS:
            fn = getattr(lib, sym, None)
            if fn is not None:
                fn(ctypes.c_int(n))
                return f"OpenBLAS threads = {n} ({sym})"
    return "BLAS threads unchanged (no OpenBLAS found)"


def set_threads(n: int) -> str:
    """Numba on min(n, NUMBA_NUM_THREADS) threads and OpenBLAS on n; returns set_blas_threads's
    note (the Numba count is `numba.get_num_threads()` afterwards)."""
    import numba

    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    return set_blas_threads(n)


@contextlib.contextmanager
def pinned_threads(n: int):
    """Numba and OpenBLAS on `n` threads for the block, restored afterwards."""
    import numba

    before = numba.get_num_threads()
    set_threads(n)
    try:
        yield
    finally:
        numba.set_num_threads(before)
        set_blas_threads(int(os.environ.get("OPENBLAS_NUM_THREADS", os.cpu_count() or 1)))
