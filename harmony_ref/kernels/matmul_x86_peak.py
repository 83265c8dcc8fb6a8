"""The machine's int8 dot rate on an x86 path (`peak_int8_gops`): register-resident tile dots of
matmul_x86.py's intrinsics with no memory traffic, the roofline the perf tests
(tests/perf/test_perf_matmul.py) report the kernels' rate against.

`_dot_peak` is compiled per process, not cached: numba's cache is keyed on the file a function
is defined in, and the intrinsics it calls live in matmul_x86.py, so a cached copy would
survive an edit to them (the kernels are cached because they sit beside their intrinsics).
"""

from __future__ import annotations

import numba
import numpy as np

from harmony_ref.kernels.matmul_x86 import (
    LANES,
    STEP,
    bcast_word,
    dot_offset_bytes,
    load_bytes,
    store_ints,
    zero_ints,
)

PEAK_WORDS = 64  # activation words `_dot_peak` cycles through (an L1-resident 256 bytes)
PEAK_ACCUMULATORS = 4  # independent tile accumulators (16 zmm) per thread in `_dot_peak`
MACS_PER_DOT = STEP  # one tile dot: 64 lanes x 4 byte products


@numba.njit(parallel=True)  # not cached: see the module doc
def _dot_peak(isa, threads, reps, data):
    """The machine's int8 dot rate on this path: each of `threads` chunks runs reps x
    PEAK_ACCUMULATORS register-resident tile dots (no memory traffic). Returns the sums (so
    nothing is optimised away); the caller times it: MACs = threads x reps x 4 x MACS_PER_DOT."""
    numba.literally(isa)
    out = np.zeros((threads, PEAK_ACCUMULATORS * LANES), dtype=np.int32)
    words = data.view(np.int32)
    for p in numba.prange(threads):
        w = load_bytes(data, 0)
        a0, a1, a2, a3 = zero_ints(), zero_ints(), zero_ints(), zero_ints()
        for it in range(reps):
            x = bcast_word(words, (it + p) % PEAK_WORDS)  # a fresh operand: nothing to hoist
            a0 = dot_offset_bytes(isa, a0, w, x)
            a1 = dot_offset_bytes(isa, a1, w, x)
            a2 = dot_offset_bytes(isa, a2, w, x)
            a3 = dot_offset_bytes(isa, a3, w, x)
        store_ints(out[p], 0, a0)
        store_ints(out[p], LANES, a1)
        store_ints(out[p], 2 * LANES, a2)
        store_ints(out[p], 3 * LANES, a3)
    return out


def peak_int8_gops(isa: int, seconds: float = 0.3) -> float:
    """Best measured int8 dot rate of path `isa` over numba's threads, in GOP/s (2 ops per MAC)."""
    import time

    data = np.random.default_rng(0).integers(0, 127, STEP, dtype=np.uint8)
    reps = 1 << 16
    threads = numba.get_num_threads()
    _dot_peak(isa, threads, 1, data)
    best = float("inf")
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        _dot_peak(isa, threads, reps, data)
        best = min(best, time.perf_counter() - t0)
    macs = threads * reps * PEAK_ACCUMULATORS * MACS_PER_DOT
    return 2 * macs / best / 1e9
