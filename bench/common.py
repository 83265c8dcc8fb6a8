"""Seeded, cached inputs shared by the asv benchmarks (numpy's benchmarks/common.py pattern).

Must not be changed -- only appended: asv compares a benchmark across commits, and changing an
input silently breaks that history. New inputs get new names.
"""

from __future__ import annotations

import functools
import gc
import time

import numpy as np

SEED = 20240601

# The sweep every predicted-metric benchmark runs over (shipped profiles and policies).
PROFILES = ["harmony-flagship", "harmony-midrange", "harmony-lowend"]
POLICIES = ["fp16", "int8", "int4-g32", "int4-g128", "mixed"]
MODEL = "llama-3.2-3b"

# Decode GEMV shapes: (N outputs, K inputs) of real projections.
GEMV_SHAPES = [(3072, 3072), (8192, 3072), (4096, 14336)]


@functools.cache
def weights(n: int, k: int, seed: int = SEED) -> np.ndarray:
    """(N, K) float32 weights shaped like an LLM projection (std 0.02). Cached: treat as read-only."""
    w = (np.random.default_rng(seed).standard_normal((n, k)) * 0.02).astype(np.float32)
    w.setflags(write=False)
    return w


@functools.cache
def activations(k: int, rows: int = 1, seed: int = SEED + 1) -> np.ndarray:
    """(rows, K) float32 activations (unit variance). Cached: treat as read-only."""
    x = np.random.default_rng(seed).standard_normal((rows, k)).astype(np.float32)
    x.setflags(write=False)
    return x


def shape_id(n: int, k: int) -> str:
    return f"n{n:05}_k{k:05}"


# --- Directions. asv takes every benchmark as lower-is-better (its compare and its Regressions
# page have no notion of "higher is better"; `unit` only labels the axis), so every track_ returns
# a record metric in its lower-is-better form, checked against the metric's own direction (the
# one the gate uses) each time it runs. tests/test_bench_metrics.py checks every track_ too.

LOWER_FORMS = {
    "same": lambda v: v,  # a lower-is-better metric, as recorded
    "reciprocal": lambda v: 1.0 / v,  # a speed-up (x) -> the slowdown (x)
    "missing_pct": lambda v: 100.0 - v,  # a % of an ideal 100 (recall@1) -> the % short of it
    # a fraction of an ideal 1 (cosine) -> the loss; float rounding can put a cosine a hair above
    # 1, and asv misreads negative values (-8e-10 "improved" on itself), so the loss stops at 0
    "one_minus": lambda v: max(0.0, 1.0 - v),
    "lost_pct": lambda v: 100.0 * (1.0 - v),  # a kept fraction (sustained/peak) -> % lost
}


def tracks(metric: str | None, form: str = "same", unit: str = "", direction: str = ""):
    """Declare what a track_ method follows: the record metric `metric` (whose direction the gate
    knows) drawn in lower-is-better `form`. A quantity no record holds passes metric=None and
    says its `direction` ("lower") itself."""
    if form not in LOWER_FORMS:
        raise ValueError(f"form {form!r}: one of {sorted(LOWER_FORMS)}")
    if metric is None and direction != "lower":
        raise ValueError("a track_ that follows no record metric must be lower-is-better")

    def mark(fn):
        fn.metric, fn.form, fn.unit, fn.direction = metric, form, unit, direction
        return fn

    return mark


def skip_for(*combos: tuple):
    """Skip a benchmark for these parameter combinations: asv_runner's `skip_params` attribute
    (what asv_runner.benchmarks.mark.skip_for_params sets), so asv records them as skipped."""

    def mark(fn):
        fn.skip_params = [tuple(c) for c in combos]
        return fn

    return mark


def lower_is_better(metric, form: str) -> float:
    """A Metric's value in lower-is-better `form`; ValueError when its recorded direction does
    not fit the form (a direction that changed must not be drawn upside down)."""
    want = "lower" if form == "same" else "higher"
    if metric.direction != want:
        raise ValueError(
            f"{metric.name} is recorded {metric.direction}-is-better; form {form!r} "
            f"is for {want}-is-better metrics"
        )
    return float(LOWER_FORMS[form](metric.value))


# --- Stable timings on a shared 2-core machine. Two things make a time on this kind of machine
# lie: a parallel Numba kernel whose worker thread is preempted waits a scheduler slice (1 ms
# kernels measured at 12 ms), and the whole VM's speed drifts by up to 1.7x over minutes, in CPU
# time too (neighbours, the host), so a time taken in one `asv run` and one taken ten minutes
# later differ by more than asv's 10% without any change. So the kernels run on THREADS = 1
# thread (Numba and OpenBLAS; tests/perf measures thread scaling), and what asv tracks is each
# kernel's CPU time *relative to a baseline timed in the same seconds* (its NumPy or _ref twin,
# else reference_probe). One sample is one round of four blocks, target, baseline, baseline,
# target (ABBA: a speed that drifts linearly within the round cancels out of the ratio, which a
# plain target-then-baseline pair does not), and the track is the median over RELATIVE_ROUNDS
# rounds (`relative_time`): a preempted block moves one sample, not the median. `asv run
# --quick` calls each track_ once (asv sets number = repeat = rounds = 1 and warmup_time = 0), so
# this median is all the repetition a quick run gets; a full run calls it again per asv round.
# asv runs every benchmark in a fresh process, and what differs between fresh processes is
# kept out of the ratio too: pin_threads() also makes a NumPy twin's large temporaries reuse
# mapped memory instead of page-faulting afresh each call (steady_memory), and the garbage
# collector is off while a ratio is timed (relative_samples).

THREADS = 1
RELATIVE_ROUNDS = 15
RELATIVE_BLOCK_S = 0.004  # CPU time of each block (four per round)


def reference_probe() -> int:
    """A fixed CPU-bound pure-Python workload (about 1 ms): the yardstick for code with no NumPy
    twin. Must not be changed: every recorded ratio is relative to it."""
    d = {}
    for i in range(4000):
        d[i % 97] = d.get(i % 97, 0) + i * i
    return sum(sorted(d.values()))


NUMBA_PROBE_STEPS = 400_000


def numba_probe() -> float:
    """A fixed compiled workload (about 1 ms): two coupled scalar recurrences, a dependency
    chain like the thermal stepper's. The yardstick for Numba code with no NumPy twin: this
    machine's speed for compiled code and for the interpreter drift apart (measured in fresh
    processes under `quiet`: reference_probe 0.46 -> 0.85 ms while this moved 1.17 -> 1.50 ms),
    so compiled code is timed against compiled code. Must not be changed."""
    return _numba_probe_fn()(NUMBA_PROBE_STEPS)


@functools.cache
def _numba_probe_fn():
    import numba

    @numba.njit(cache=False)
    def probe(n):
        x, y = 0.5, 0.25
        for i in range(n):
            x = x * 0.999 + y * 0.001 + 1e-9 * i
            y = y * 0.998 + x * 0.002
        return x + y

    return probe


def relative_samples(
    target, baseline, rounds: int = RELATIVE_ROUNDS, block_s: float = RELATIVE_BLOCK_S
) -> list[float]:
    """Per round, the CPU time per call of `target` over that of `baseline`, from four blocks of
    back-to-back calls in the order target, baseline, baseline, target (lower: target faster).
    Block sizes are set once so each block takes about `block_s`; both are called twice first
    (compile, caches, lazy set-up) and the second call sizes the block. The cyclic garbage
    collector is off while it times (as in timeit): when a collection runs depends on how many
    objects the fresh process happens to hold, not on the code timed."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        return _relative_samples(target, baseline, rounds, block_s)
    finally:
        if was_enabled:
            gc.enable()


def _relative_samples(target, baseline, rounds: int, block_s: float) -> list[float]:
    from harmony_ref.backends.host_timing import interleaved_times_s

    clock = time.process_time
    sizes = []
    for fn in (target, baseline):
        fn()
        t0 = clock()
        fn()
        sizes.append(max(1, int(block_s / max(clock() - t0, 1e-6))))
    a1, b1, b2, a2 = interleaved_times_s(
        [target, baseline, baseline, target],
        rounds,
        calls=[sizes[0], sizes[1], sizes[1], sizes[0]],
        clock=clock,
    )
    return [(a + c) / max(b + d, 1e-12) for a, b, d, c in zip(a1, b1, b2, a2)]


def relative_time(target, baseline, rounds: int = RELATIVE_ROUNDS) -> float:
    """The median of relative_samples: what a relative track_ returns."""
    return float(np.median(relative_samples(target, baseline, rounds)))


def pin_threads(n: int = THREADS) -> None:
    """Numba and OpenBLAS on `n` threads, and steady_memory(), for the rest of this benchmark
    process (call it first in setup, before the inputs are allocated)."""
    import numba

    from harmony_ref._threads import set_blas_threads

    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    set_blas_threads(n)
    steady_memory()


# glibc mallopt parameters (malloc.h) and glibc's defaults for them
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_DEFAULTS = {_M_TRIM_THRESHOLD: 128 * 1024, _M_MMAP_MAX: 65536}
_steady = False


def _mallopt(settings: dict[int, int]) -> bool:
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        return all(libc.mallopt(k, v) == 1 for k, v in settings.items())
    except (OSError, AttributeError, TypeError):
        return False


def _madvise_hugepage(on: bool) -> None:
    try:
        np._core.multiarray._set_madvise_hugepage(on)
    except AttributeError:  # numpy < 2
        np.core.multiarray._set_madvise_hugepage(on)


def steady_memory() -> bool:
    """Make a NumPy reference's temporaries cost the same in every process: glibc keeps freed
    memory (no mmap per large array, no trimming), so from the second call on a temporary reuses
    pages already mapped, and NumPy stops asking for transparent huge pages. Otherwise every
    call of e.g. decode_attention_ref at 4096 tokens page-faults its 64 MB temporaries afresh
    (measured: up to half its CPU time in the kernel, 2,000-33,000 faults per call), and what
    that costs -- huge pages granted or not, glibc's adaptive mmap threshold raised or not --
    is the fresh process's luck, moving ratios by 30-70% between processes
    (bench/asv_spread.json). False where glibc's mallopt is not available. For a benchmark
    process (asv starts one per benchmark); a test that calls a benchmark's setup in a longer
    process puts the defaults back with restore_memory (tests/conftest.py does, after each)."""
    global _steady
    _steady = True
    _madvise_hugepage(False)
    return _mallopt({_M_MMAP_MAX: 0, _M_TRIM_THRESHOLD: 2**31 - 1})


def restore_memory() -> None:
    """Undo steady_memory: glibc's default mmap and trim settings, NumPy's huge-page advice."""
    global _steady
    if _steady:
        _steady = False
        _madvise_hugepage(True)
        _mallopt(_DEFAULTS)


@functools.cache
def int4_weights(n: int, k: int, group_size: int, scheme: str = "asym"):
    """quantize_int4(weights(n, k)), cached (read-only by convention)."""
    from harmony_ref.quant.int4 import quantize_int4

    return quantize_int4(weights(n, k), group_size, scheme)


@functools.cache
def int8_weights(n: int, k: int):
    from harmony_ref.quant.int8 import quantize_int8

    return quantize_int8(weights(n, k))
