"""Cold start measured on this host: the hardware-in-the-loop half of the cold-start model.

What it does, in order (`measure_host_coldstart`):
1. Writes a real quantized weights file: `layers` matrices of (rows, cols) quantized group-wise
   INT4 (the "int4" entry of kernels/formats.py), stored as safetensors (packed uint8 nibbles,
   float16 scales, int8 zero points per layer), atomically (harmony_ref/_io.py).
2. Before each cold measurement: fsync, then `os.posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)`,
   and checks the result with mincore(2) on a fresh read-only mapping (a mapping without touching
   it faults nothing in, so mincore reports page-cache residency). "Eviction confirmed" means
   under `EVICTED_RESIDENT_PCT_MAX` of the file's pages are still cached. Where mincore is not
   available (non-Linux), the report says "unconfirmed".
3. In a fresh Python subprocess per strategy (so peak RSS and JIT state are its own):
   - read: `safetensors.numpy.load_file` (the whole file copied into process memory);
   - mmap: the safetensors header parsed (checkpoint/safetensors.py) and every tensor an
     `np.memmap` view (nothing read until used; page faults move the I/O into the first inference).
   Each then times the first GEMV over every layer (cold: page faults for mmap, cold CPU caches)
   and the steady-state GEMV (best of `steady_repeats`: on a shared machine other processes only
   ever add time, so the fastest pass is the one closest to what the hardware does; the median is
   kept beside it). RSS is sampled with psutil after each phase; the report gives the largest
   sample and, on Linux, the kernel's high-water mark (getrusage ru_maxrss), which a sample can
   miss.
4. Numba JIT: import + first call of the GEMV kernel in a subprocess with an empty
   NUMBA_CACHE_DIR (compile) and again with the same directory (load from the on-disk cache).
5. A warm read (page cache hot) for contrast: the difference is what storage costs.

The GEMV is the project's kernel, `harmony_ref.kernels.matmul.matmul_w4` (Numba, `cache=True`).
Its one-time weight repack (`prepare_w4`, row interleaving, what llama.cpp also does at load) is
timed separately and is part of the first inference.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import mmap
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harmony_ref._io import write_bytes_atomic
from harmony_ref.checkpoint.safetensors import mmap_tensors
from harmony_ref.units import GB, KIB, MB, MS_PER_S

EVICTED_RESIDENT_PCT_MAX = 5.0  # "evicted" if fewer than this % of the file's pages are cached
DEFAULT_LAYERS = 12
DEFAULT_ROWS = 4096
DEFAULT_COLS = 4096  # 12 x 4096 x 4096 at INT4 g128 ~ 105 MB
MAX_FILE_WEIGHTS = 2**31  # layers x rows x cols: a ~1.1 GB file, built in memory first


# ----------------------------------------------------------------------------------------------
# The weights file.


def check_model_file_shape(layers: int, rows: int, cols: int, group_size: int = 128) -> None:
    """ValueError unless `write_model_file` can write (and this host hold) such a file."""
    if layers < 1 or rows < 1 or cols < group_size or cols % group_size:
        raise ValueError(
            f"layers={layers}, rows={rows}, cols={cols}: need >= 1 layer and cols a "
            f"multiple of group_size={group_size}"
        )
    if layers * rows * cols > MAX_FILE_WEIGHTS:
        raise ValueError(
            f"layers={layers:,}, rows={rows:,}, cols={cols:,}: {layers * rows * cols:,} "
            f"weights, at most {MAX_FILE_WEIGHTS:,}"
        )


def write_model_file(
    path: Path,
    layers: int = DEFAULT_LAYERS,
    rows: int = DEFAULT_ROWS,
    cols: int = DEFAULT_COLS,
    group_size: int = 128,
    seed: int = 0,
) -> dict:
    """Quantize `layers` seeded random (rows, cols) matrices to INT4 and save them as safetensors,
    atomically. Returns {"path", "bytes", "layers", "rows", "cols", "group_size"}."""
    from safetensors.numpy import save

    from harmony_ref.kernels.formats import FORMATS

    check_model_file_shape(layers, rows, cols, group_size)
    rng = np.random.default_rng(seed)
    tensors = {}
    for i in range(layers):
        w = rng.standard_normal((rows, cols), dtype=np.float32) * 0.02
        t = FORMATS["int4"].quantize(w, group_size)
        tensors.update({f"layers.{i}.weight{s}": a for s, a in FORMATS["int4"].arrays(t).items()})
    path = write_bytes_atomic(
        path, save(tensors, metadata={"format": "int4-asym", "group_size": str(group_size)})
    )
    return {
        "path": str(path),
        "bytes": path.stat().st_size,
        "layers": layers,
        "rows": rows,
        "cols": cols,
        "group_size": group_size,
    }


def _layers_from(tensors: dict, group_size: int):
    from harmony_ref.kernels.formats import FORMATS

    i, out = 0, []
    while f"layers.{i}.weight.packed" in tensors:
        w = f"layers.{i}.weight"
        arrays = {s: tensors[w + s] for s in (".packed", ".scale", ".zero_point")}
        rows, half = arrays[".packed"].shape
        out.append(FORMATS["int4"].from_arrays(arrays, (rows, half * 2), group_size))
        i += 1
    return out


# ----------------------------------------------------------------------------------------------
# Page cache: evict and check.


def _libc():
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name, use_errno=True) if name else None


def resident_fraction(path: Path) -> float | None:
    """Fraction of the file's pages in the page cache, via mincore(2) on an untouched mapping;
    None where mincore is unavailable."""
    libc = _libc()
    size = Path(path).stat().st_size
    if libc is None or not hasattr(libc, "mincore") or size == 0:
        return None
    page = mmap.PAGESIZE
    pages = (size + page - 1) // page
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    with open(path, "rb") as f:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            vec = ctypes.create_string_buffer(pages)
            if libc.mincore(addr, size, vec) != 0:
                return None
            resident = np.frombuffer(vec.raw, dtype=np.uint8) & 1
        finally:
            libc.munmap(addr, size)
    return float(resident.sum()) / pages


def evict(path: Path) -> dict:
    """fsync + POSIX_FADV_DONTNEED; returns residency before/after and whether eviction held."""
    before = resident_fraction(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    after = resident_fraction(path)
    if after is None:
        status = "unconfirmed (mincore unavailable)"
    elif after * 100 <= EVICTED_RESIDENT_PCT_MAX:
        status = "confirmed"
    else:
        status = f"failed ({after:.0%} of pages still cached)"
    return {
        "resident_before_pct": None if before is None else 100 * before,
        "resident_after_pct": None if after is None else 100 * after,
        "eviction": status,
        "method": "fsync + posix_fadvise(DONTNEED), checked with mincore(2)",
    }


# ----------------------------------------------------------------------------------------------
# Probes: run in a fresh interpreter, print one JSON object.


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / MB


def _rss_high_water_mb() -> float | None:
    """The kernel's peak RSS of this process (Linux: VmHWM, via getrusage in KiB): unlike
    sampling, it cannot miss a short-lived peak between samples. None where unavailable."""
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib * KIB / MB if sys.platform.startswith("linux") else None


def _probe_load(mode: str, path: str, group_size: int, steady_repeats: int) -> dict:
    from harmony_ref.kernels.formats import FORMATS

    int4 = FORMATS["int4"]
    matmul_w4, prepare_w4 = int4.matmul, int4.prepare
    x0 = np.random.default_rng(1).standard_normal(DEFAULT_COLS).astype(np.float32)
    # Compile the kernels (or load them from the Numba cache) on a tiny input outside the timings.
    matmul_w4(x0[:group_size], int4.quantize_ref(np.ones((2, group_size), np.float32), group_size))
    rss = [_rss_mb()]
    t0 = time.perf_counter()
    if mode == "read":
        from safetensors.numpy import load_file

        tensors = load_file(path)
    elif mode == "mmap":
        tensors = mmap_tensors(Path(path))
    else:
        raise ValueError(f"mode = {mode!r}: must be 'read' or 'mmap'")
    layers = _layers_from(tensors, group_size)
    load_s = time.perf_counter() - t0
    rss.append(_rss_mb())
    x = np.resize(x0, layers[0].shape[1])
    t1 = time.perf_counter()
    for layer in layers:
        prepare_w4(layer)  # touches every weight page (mmap: the page faults land here)
    repack_s = time.perf_counter() - t1

    def one_pass():
        t = time.perf_counter()
        for layer in layers:
            matmul_w4(x, layer)
        return time.perf_counter() - t

    first_s = repack_s + one_pass()
    rss.append(_rss_mb())
    steady = [one_pass() for _ in range(steady_repeats)]
    rss.append(_rss_mb())
    return {
        "mode": mode,
        "load_ms": load_s * MS_PER_S,
        "repack_ms": repack_s * MS_PER_S,
        "first_gemv_ms": first_s * MS_PER_S,
        "steady_gemv_ms": min(steady) * MS_PER_S,
        "steady_gemv_median_ms": statistics.median(steady) * MS_PER_S,
        "steady_gemv_samples_ms": [s * MS_PER_S for s in steady],
        "peak_rss_mb": max(rss),
        "rss_samples_mb": rss,
        "rss_high_water_mb": _rss_high_water_mb(),
        "layers": len(layers),
    }


def _probe_jit(group_size: int) -> dict:
    """First and second call of the INT4 GEMV in a fresh interpreter: importing the kernels
    (Numba compiles or loads from its cache on the first call) is inside the first."""
    from harmony_ref.quant.int4 import quantize_int4_ref  # NumPy: nothing to compile

    t = quantize_int4_ref(np.ones((2, group_size), np.float32), group_size, "asym")
    x = np.ones(group_size, np.float32)
    t0 = time.perf_counter()
    from harmony_ref.kernels.matmul import (
        matmul_w4,  # imported inside the timing, as a runtime would
    )

    matmul_w4(x, t)
    t1 = time.perf_counter()
    matmul_w4(x, t)
    t2 = time.perf_counter()
    return {"gemv_first_call_ms": (t1 - t0) * MS_PER_S, "gemv_second_call_ms": (t2 - t1) * MS_PER_S}


def _run_probe(args: list[str], env_extra: dict | None = None) -> dict:
    env = dict(os.environ, **(env_extra or {}))
    # As tests/perf/conftest.py: sleeping OpenMP workers take a scheduler tick to wake on a VM,
    # which would swamp a per-layer GEMV; spin instead unless the caller chose otherwise.
    env.setdefault("OMP_WAIT_POLICY", "active")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    r = subprocess.run(
        [sys.executable, "-m", "harmony_ref.job.host_coldstart", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if r.returncode != 0:
        raise RuntimeError(
            f"cold-start probe {args} failed (exit {r.returncode}): {r.stderr[-2000:]}"
        )
    return json.loads(r.stdout.strip().splitlines()[-1])


def measure_host_coldstart(
    layers: int = DEFAULT_LAYERS,
    rows: int = DEFAULT_ROWS,
    cols: int = DEFAULT_COLS,
    group_size: int = 128,
    steady_repeats: int = 5,
    workdir: str | Path | None = None,
    progress=None,
) -> dict:
    """Run the whole measurement; returns plain numbers (ms, MB) plus how eviction went."""
    say = progress or (lambda msg: None)
    own_dir = workdir is None
    base = Path(tempfile.mkdtemp(prefix="harmony-coldstart-")) if own_dir else Path(workdir)
    base.mkdir(parents=True, exist_ok=True)
    path = base / "model-int4.safetensors"
    try:
        say("writing the quantized weights file")
        t0 = time.perf_counter()
        info = write_model_file(path, layers, rows, cols, group_size)
        info["write_ms"] = (time.perf_counter() - t0) * MS_PER_S
        out = {"file": info, "strategies": {}}
        for mode in ("read", "mmap"):
            say(f"evicting, then loading by {mode}")
            ev = evict(path)
            res = _run_probe(["--probe", mode, str(path), str(group_size), str(steady_repeats)])
            res.update(ev)
            out["strategies"][mode] = res
        say("warm read (page cache hot) for contrast")
        _ = path.read_bytes()
        warm = _run_probe(["--probe", "read", str(path), str(group_size), str(steady_repeats)])
        warm.update(
            {"resident_before_pct": resident_fraction(path), "eviction": "not evicted (warm)"}
        )
        out["strategies"]["read_warm"] = warm
        say("Numba JIT: empty cache vs warm cache")
        with tempfile.TemporaryDirectory(prefix="harmony-numba-cache-") as cache:
            cold = _run_probe(["--probe-jit", str(group_size)], {"NUMBA_CACHE_DIR": cache})
            cached = _run_probe(["--probe-jit", str(group_size)], {"NUMBA_CACHE_DIR": cache})
        out["jit"] = {
            "compile_ms": cold["gemv_first_call_ms"],
            "cached_ms": cached["gemv_first_call_ms"],
            "second_call_ms": cached["gemv_second_call_ms"],
        }
        cold_read = out["strategies"]["read"]["load_ms"]
        out["storage_read_gbps"] = (
            info["bytes"] / (cold_read / MS_PER_S) / GB if cold_read > 0 else None
        )
        return out
    finally:
        for p in (path,):
            p.unlink(missing_ok=True)
        if own_dir:
            base.rmdir()


def side_by_side(
    model_row_read: dict, model_row_mmap: dict, file_mb: float, host: dict, storage_gbps: float
) -> list[dict]:
    """Pair each modelled step (device/coldstart.py breakdown rows of one profile, cold start by
    read and by mmap) with its host measurement (different file sizes: both shown)."""
    r, m = host["strategies"]["read"], host["strategies"]["mmap"]
    return [
        {
            "step": "model file (MB)",
            "modelled": file_mb,
            "host": host["file"]["bytes"] / MB,
            "host_measured_as": "safetensors: packed INT4 + fp16 scales + int8 zero points",
        },
        {
            "step": "load by read (ms)",
            "modelled": model_row_read["storage_read_ms"] + model_row_read["heap_copy_ms"],
            "host": r["load_ms"],
            "host_measured_as": f"safetensors.numpy.load_file after eviction ({r['eviction']})",
        },
        {
            "step": "load by mmap (ms)",
            "modelled": 0.0,
            "host": m["load_ms"],
            "host_measured_as": f"header parse + np.memmap views after eviction ({m['eviction']})",
        },
        {
            "step": "storage read (GB/s)",
            "modelled": storage_gbps,
            "host": host["storage_read_gbps"],
            "host_measured_as": "file bytes / cold read load time",
        },
        {
            "step": "first inference extra, mmap (ms)",
            "modelled": model_row_mmap["storage_read_ms"] + model_row_mmap["page_fault_ms"],
            "host": m["first_gemv_ms"] - m["steady_gemv_ms"],
            "host_measured_as": "first pass (repack + GEMV, page faults) - steady pass",
        },
        {
            "step": "first inference extra, read (ms)",
            "modelled": model_row_read["first_touch_ms"] + model_row_read["kernel_load_ms"],
            "host": r["first_gemv_ms"] - r["steady_gemv_ms"],
            "host_measured_as": "first pass (repack + GEMV) - steady pass",
        },
        {
            "step": "kernel compile / load (ms)",
            "modelled": model_row_read["kernel_load_ms"],
            "host": host["jit"]["compile_ms"] - host["jit"]["cached_ms"],
            "host_measured_as": "Numba GEMV first call: empty cache - warm cache",
        },
        {
            "step": "warm inference (ms)",
            "modelled": model_row_read["first_token_ms"],
            "host": r["steady_gemv_ms"],
            "host_measured_as": "steady GEMV pass over every layer (one token's weights), best of "
            f"{len(r['steady_gemv_samples_ms'])}",
        },
        {
            "step": "peak RSS, read / mmap (MB)",
            "modelled": float("nan"),
            "host": r["peak_rss_mb"],
            "host_measured_as": f"psutil RSS; mmap: {m['peak_rss_mb']:.0f} MB",
        },
    ]


def host_metrics(result: dict):
    """The measurement as `measured` Metrics (names carry units)."""
    from harmony_ref.metrics import Metrics

    m = Metrics()
    for mode in ("read", "mmap"):
        s = result["strategies"][mode]
        m.add(f"host_coldstart_{mode}_load_ms", s["load_ms"], "ms", kind="measured")
        m.add(f"host_coldstart_{mode}_first_gemv_ms", s["first_gemv_ms"], "ms", kind="measured")
        m.add(
            f"host_coldstart_{mode}_steady_gemv_ms",
            s["steady_gemv_ms"],
            "ms",
            kind="measured",
            samples=s["steady_gemv_samples_ms"],
        )
        m.add(f"host_coldstart_{mode}_peak_rss_mb", s["peak_rss_mb"], "MB", kind="measured")
    m.add("host_numba_compile_ms", result["jit"]["compile_ms"], "ms", kind="measured")
    m.add("host_numba_cached_ms", result["jit"]["cached_ms"], "ms", kind="measured")
    return m


if __name__ == "__main__":  # probe entry point, used by _run_probe
    if sys.argv[1] == "--probe":
        _mode, _path, _g, _rep = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        print(json.dumps(_probe_load(_mode, _path, _g, _rep)))
    elif sys.argv[1] == "--probe-jit":
        print(json.dumps(_probe_jit(int(sys.argv[2]))))
    else:
        raise SystemExit(f"unknown probe {sys.argv[1:]}")
