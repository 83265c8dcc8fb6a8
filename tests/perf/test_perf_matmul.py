"""The matmul tables (issue 17): one decode GEMV (N=11008, K=4096, one token) and one prefill GEMM
(M=128, K=N=4096), each contender timed in the same run, interleaved:

    NumPy FP32 (BLAS)                        the baseline every ratio is against
    ours W4 g32 / W8 on every path this CPU runs (x86 paths and the portable loops, forced per
                                             call on this same CPU: what a CPU without VNNI or
                                             without AVX2 would run, not such a CPU)
    llama.cpp Q4_0 / Q4_1 / Q8_0 in its CPU, CPU_REPACK and AMX weight buffers, when the
                                             optional `peer` extra (or HARMONY_REF_GGML_LIB) is
                                             there and each configuration passed its probe

Timing: rounds of back-to-back blocks of BLOCK_CALLS calls per contender, contenders in turn, a
pause between blocks so the previous library's spinning threads stop; a block's time is its
calls after the first (thread wake-up) averaged; each contender's figure is the median over
rounds. GEMV weights are cycled through copies exceeding the last-level cache (cold, as in
decode); prefill weights are reused 128 times per call, so they stay as they are.

Limits, measured in this run: GEMV GB/s against the read bandwidth of all threads over a
buffer beyond the last-level cache (timed as one more contender of the GEMV table, so it sees
the same machine as the kernels); GEMM GOP/s (2 per multiply-add) against the peak int8 dot
rate of the best path (`matmul_x86_peak.peak_int8_gops`, register-resident vpdpbusd).

Not gated by `tox -e perf` (no pytest-benchmark timing): the tables run on two threads, and on a
shared 2-core machine a two-thread call waits a scheduler slice whenever a worker is preempted;
the same kernels are gated one-threaded, relative to NumPy, in test_perf_kernels.py.
"""

from __future__ import annotations

import copy
import itertools
import os
import statistics
import time

import numba
import numpy as np
import pytest

from harmony_ref.backends.host_timing import interleaved_times_s
from harmony_ref.kernels import matmul as mm
from harmony_ref.kernels import matmul_x86_peak
from harmony_ref.lab import ggml_peer
from harmony_ref.quant.int4 import quantize_int4
from harmony_ref.quant.int8 import quantize_int8
from harmony_ref.units import GB, MB, MS_PER_S

K = 4096
SHAPES = {"gemv": (1, 11008), "prefill": (128, 4096)}  # (M, N), K = 4096
THREADS = min(2, numba.config.NUMBA_NUM_THREADS)  # the tables' threads (1 on a 1-thread run)
BLOCK_CALLS = {"gemv": 12, "prefill": 4}
ROUNDS = {"gemv": 11, "prefill": 9}
SETTLE_S = 0.4  # OpenBLAS threads spin ~0.1-0.3 s after a call: less and they steal a core
PEERS = [
    ("q4_0", "CPU"),
    ("q4_0", "CPU_REPACK"),
    ("q4_0", "AMX"),
    ("q4_1", "CPU"),
    ("q4_1", "AMX"),
    ("q8_0", "CPU"),
    ("q8_0", "AMX"),
]
PEER_BITS_PER_WEIGHT = {"q4_0": 4.5, "q4_1": 5.0, "q8_0": 8.5}  # ggml's block sizes (for copies)
MIN_COLD_BYTES = 128 * MB


def last_level_cache_bytes() -> int:
    """Size of the largest cache sysfs reports for cpu0 (0 when unknown)."""
    best = 0
    for d in (
        sorted(os.listdir("/sys/devices/system/cpu/cpu0/cache"))
        if os.path.isdir("/sys/devices/system/cpu/cpu0/cache")
        else []
    ):
        try:
            with open(f"/sys/devices/system/cpu/cpu0/cache/{d}/size") as f:
                text = f.read().strip()
        except OSError:
            continue
        scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1], 1)
        best = max(best, int(text.rstrip("KMG")) * scale)
    return best


def cold_bytes() -> int:
    """Working set for cold GEMV operands: 1.5x the last-level cache, at least 128 MB."""
    return max(MIN_COLD_BYTES, int(1.5 * last_level_cache_bytes()))


def interleaved_medians(fns: dict, block: int, rounds: int) -> dict[str, float]:
    """Median over rounds of each fn's per-call seconds (calls after the first of a block)."""
    calls = list(fns.values())

    def settle_and_warm(i: int) -> None:
        time.sleep(SETTLE_S)
        calls[i]()

    per_round = interleaved_times_s(calls, rounds, calls=block - 1, before=settle_and_warm)
    return {name: statistics.median(ts) for name, ts in zip(fns, per_round)}


@pytest.fixture(scope="module")
def peer():
    return ggml_peer.GgmlPeer.load()


@pytest.fixture(scope="module")
def machine_limits():
    before = numba.get_num_threads()
    numba.set_num_threads(THREADS)
    try:
        best = mm.SUPPORTED_ISAS[-1]
        peak = matmul_x86_peak.peak_int8_gops(best) if best != mm.ISA_PORTABLE else float("nan")
        return {"int8_peak_gops": peak, "int8_peak_path": mm.ISA_NAMES[best]}
    finally:
        numba.set_num_threads(before)


READ_CHUNKS = 256  # prange chunks of the read-bandwidth buffer (each summed by a SIMD loop)


@numba.njit(parallel=True, cache=True)
def _read_sum(a):
    """Sum of a (int64): every byte read once, chunk by chunk, each chunk a vectorised loop."""
    step = -(-a.size // READ_CHUNKS)
    sums = np.zeros(READ_CHUNKS, dtype=np.int64)
    for c in numba.prange(READ_CHUNKS):
        s = 0
        for i in range(c * step, min(a.size, (c + 1) * step)):
            s += a[i]
        sums[c] = s
    return sums.sum()


READ_PROBE = "read bandwidth probe"  # the GEMV table's limit, timed with the contenders


def _contenders(shape, w, x, peer, enabled):
    """name -> (callable, weight bytes, note)."""
    m, n = SHAPES[shape]
    cold = shape == "gemv" and enabled
    copies = max(1, -(-cold_bytes() // w.nbytes)) if cold else 1
    ws = [w] + [w.copy() for _ in range(copies - 1)]
    it = itertools.cycle(ws)
    xv = x[0] if m == 1 else x
    numpy_fp32 = (lambda: next(it) @ xv) if m == 1 else (lambda: x @ next(it).T)
    out = {"numpy fp32": (numpy_fp32, w.nbytes, "")}
    t4, t8 = quantize_int4(w, 32, "asym"), quantize_int8(w)
    for isa in reversed(mm.SUPPORTED_ISAS):
        name = mm.ISA_NAMES[isa]
        for fmt, t, prep, fn in (
            ("w4 g32", t4, mm._prepare_w4, mm._matmul_w4),
            ("w8", t8, mm._prepare_w8, mm._matmul_w8),
        ):
            p = prep(t, isa)
            nbytes = sum(a.nbytes for a in vars(p).values() if isinstance(a, np.ndarray))
            count = max(1, -(-cold_bytes() // nbytes)) if cold else 1
            ps = itertools.cycle([p] + [copy.deepcopy(p) for _ in range(count - 1)])
            out[f"ours {fmt} {name}"] = (
                (lambda ps=ps, fn=fn, isa=isa: fn(xv, next(ps), isa)),
                nbytes,
                "",
            )
    if peer is None:
        return out
    for fmt, buft in PEERS:
        label = f"llama.cpp {fmt} {buft}"
        verdict = ggml_peer.probe(peer, fmt, buft, m, n, K, THREADS)
        if not verdict.ok:
            out[label] = (None, 0, verdict.detail)
            continue
        nbytes = int(n * K * PEER_BITS_PER_WEIGHT[fmt] / 8)
        count = max(1, -(-cold_bytes() // nbytes)) if cold else 1
        pm = peer.matmul(w, x, fmt, buft, count, THREADS)
        out[label] = (pm.run, pm.weight_bytes, verdict.detail)
    return out


@pytest.mark.parametrize("shape", list(SHAPES))
def test_perf_matmul_table(timing_enabled, perf_summary, machine_limits, peer, shape):
    m, n = SHAPES[shape]
    rng = np.random.default_rng(17)
    w = rng.standard_normal((n, K), dtype=np.float32) * np.float32(0.02)
    x = rng.standard_normal((m, K), dtype=np.float32)
    before = numba.get_num_threads()
    numba.set_num_threads(THREADS)
    try:
        contenders = _contenders(shape, w, x, peer, timing_enabled)
        runnable = {k: v[0] for k, v in contenders.items() if v[0] is not None}
        if shape == "gemv":
            buf = np.ones(cold_bytes() // 8 if timing_enabled else 1024, dtype=np.int64)
            runnable[READ_PROBE] = lambda: _read_sum(buf)
        for fn in runnable.values():
            fn()  # compile / load / first touch outside the timing
        times = interleaved_medians(
            runnable,
            BLOCK_CALLS[shape] if timing_enabled else 2,
            ROUNDS[shape] if timing_enabled else 1,
        )
    finally:
        numba.set_num_threads(before)
    base = times["numpy fp32"]
    ops = 2 * m * n * K
    if shape == "gemv":
        machine_limits = {**machine_limits, "read_gbps": buf.nbytes / times[READ_PROBE] / GB}
    rows = []
    for name, (fn, nbytes, note) in contenders.items():
        row = {"table": f"{shape} M={m} N={n} K={K}", "contender": name}
        if fn is None:
            row.update({"ms": float("nan"), "note": note})
        else:
            t = times[name]
            row.update({"ms": t * MS_PER_S, "x_numpy_fp32": base / t})
            if shape == "gemv":
                gbps = (nbytes + x.nbytes + 4 * n) / t / GB
                row.update({"gbps": gbps, "pct_read_bw": 100 * gbps / machine_limits["read_gbps"]})
            else:
                gops = ops / t / 1e9
                peak = machine_limits["int8_peak_gops"]
                row.update({"gops": gops, "pct_int8_peak": 100 * gops / peak})
            row["note"] = note
        rows.append(row)
        perf_summary.append(row)
    perf_summary.append(
        {
            "table": f"{shape} M={m} N={n} K={K}",
            "contender": "machine limits",
            "note": _limits_note(shape, machine_limits),
        }
    )


def _limits_note(shape, limits) -> str:
    read = (
        f"read {limits['read_gbps']:.1f} GB/s ({THREADS} threads, {cold_bytes() / MB:.0f} MB); "
        if shape == "gemv"
        else ""
    )
    return read + (
        f"int8 peak {limits['int8_peak_gops']:.0f} GOP/s "
        f"({limits['int8_peak_path']}, {THREADS} threads)"
    )
