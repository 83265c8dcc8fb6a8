"""The host set's measurements, taken on the machine at hand: what `harmony-ref calibrate
--backend host` runs and what tools/fidelity_host.py records into the committed fixtures.

    session = measure_session(runs, model="smollm2-135m", repeats=5, progress=report)

A session is one dict, the format of harmony_ref/data/fidelity/host/s*.json:
- "machine": this machine's microbenchmarks (streaming reads of 64 MiB, of half the L3 and from
  DRAM at 1 and 2 threads, a Numba parallel call's cost at 1 and 2 threads, NumPy's float16 widening per
  weight) and its facts (lscpu model, flags, L2, L3, frequency);
- "runs": per run id, real generations of the checkpoint through runtime/llama.py timed end to
  end by backends/host_llm.py (prefill_ms, decode_step_ms, ttft_ms, e2e_ms with their samples);
- "profiles": per run that names `profile_contexts` (the fit runs), a per-call profile
  (calibrate/decoder_ops.py profile_forward) of its prefill and of decode steps at each context.

Nothing here fits or scores: calibrate/host_runs.py does, on the split the run list states
before any measurement. Run it on a quiet machine: a second busy core turns a 2-thread step
into noise.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from functools import partial

import numba
import numpy as np

from harmony_ref.backends.host_timing import interleaved_times_s

PROFILE_REPEATS = 5  # profiled forwards per step (after one warm-up)


@numba.njit(parallel=True, fastmath=True, cache=True)  # fastmath: a vectorized reduction
def _psum(a):
    s = 0.0
    for i in numba.prange(a.shape[0]):
        s += a[i]
    return s


@numba.njit(parallel=True, cache=True)
def _pnop(a):
    for i in numba.prange(a.shape[0]):
        a[i] += 1.0


def _times(fn, repeats: int) -> list[float]:
    """Seconds of each of `repeats` calls of fn (backends/host_timing.py's harness)."""
    return interleaved_times_s([fn], repeats)[0]


def stream_gbps(nbytes: int, threads: int, repeats: int = 7) -> float:
    """GB/s of a parallel sum over `nbytes` of float64 at `threads` threads, best of `repeats`."""
    numba.set_num_threads(threads)
    a = np.ones(nbytes // 8, dtype=np.float64)
    _psum(a)
    best = min(_times(lambda: _psum(a), repeats))
    return nbytes / best / 1e9


def sync_us(threads: int, repeats: int = 2000) -> float:
    """Median us of a Numba parallel call that does almost nothing: its fork and join."""
    numba.set_num_threads(threads)
    a = np.zeros(64)
    _pnop(a)
    t = _times(lambda: _pnop(a), repeats)
    return statistics.median(t) * 1e6


def widen_ns_per_weight(rows: int = 4096, k: int = 576, repeats: int = 21) -> float:
    """ns per weight of the decoder's fp16 widening (kernels/formats.py matmul_f16_chunked:
    float16 rows -> float32, one F16_CHUNK_ROWS chunk of a SmolLM2-wide matrix), best of
    `repeats`: the per-call pass the harmony-ref-host runtime's [overhead]
    fp16_widen_ns_per_weight prices."""
    w16 = np.random.default_rng(0).standard_normal((rows, k)).astype(np.float16)
    w16.astype(np.float32)
    best = min(_times(lambda: w16.astype(np.float32), repeats))
    return best / (rows * k) * 1e9


# (K, N) of a 576-wide decoder's prefill GEMMs (SmolLM2-135M: fused q/k/v, o, fused gate/up,
# down): what the thread share is measured on
GEMM_SHAPES = ((576, 960), (576, 576), (576, 3072), (1536, 576))


def gemm_thread_share(m: int = 128, shapes=GEMM_SHAPES, repeats: int = 11) -> float:
    """What a second thread adds to this runtime's own prefill GEMMs (kernels/matmul.py's int8
    kernel, activations quantized per call as in the decoder, on each of `shapes` with `m`
    rows), as a share of one thread's rate: their summed 1-thread time over their summed
    2-thread time, minus one, in [0, 1]; best of `repeats` each. Below 1 where a call's serial
    part (its activation quantization, the fork and join) or the guest's shared cores cost
    what no nominal peak says."""
    from harmony_ref.kernels.matmul import matmul_w8, prepare_w8
    from harmony_ref.quant.int8 import quantize_int8

    rng = np.random.default_rng(0)
    total = {1: 0.0, 2: 0.0}
    for k, n in shapes:
        w = prepare_w8(quantize_int8(rng.standard_normal((n, k)).astype(np.float32)))
        x = rng.standard_normal((m, k)).astype(np.float32)
        for t in (1, 2):
            numba.set_num_threads(t)
            matmul_w8(x, w)
            total[t] += min(_times(partial(matmul_w8, x, w), repeats))
    numba.set_num_threads(1)
    return float(min(1.0, max(0.0, total[1] / total[2] - 1.0)))


def lscpu_model() -> str:
    """'Model name=...; CPU family=...; Model=...' as lscpu prints them ('' without lscpu)."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return ""
    keep = ("Model name", "CPU family", "Model:")
    return "; ".join(
        line.split(":", 1)[0].strip() + "=" + line.split(":", 1)[1].strip()[:60]
        for line in text.splitlines()
        if line.startswith(keep)
    )


def _l3_size() -> str:
    for idx in range(4, 0, -1):
        base = f"/sys/devices/system/cpu/cpu0/cache/index{idx}"
        try:
            with open(f"{base}/level") as f:
                if f.read().strip() != "3":
                    continue
            with open(f"{base}/size") as f:
                return f.read().strip()
        except OSError:
            continue
    return "0K"


def cache_size_bytes(text: str) -> float:
    """Bytes of a sysfs cache size ("32768K"; 0 for "0K" or ""), as host_measure.py records it."""
    text = text.strip().upper()
    for unit, mult in (("K", 1024), ("M", 1024**2), ("G", 1024**3)):
        if text.endswith(unit):
            return float(text[:-1]) * mult
    return float(text or 0)


def machine(dram_bytes: int = 2 << 30, cache_bytes: int = 64 << 20) -> dict:
    """This machine's facts and microbenchmarks (see the module docstring): the "cache" read is
    of 64 MiB (in the L3 of the Xeon the fixtures ran on; from DRAM where the L3 is smaller, as
    a checkpoint's weights are then read too: the bandwidth the harmony-ref-host fit is seeded
    with), the "l3" read of half the L3 (in it on every machine: the SoC profile's cache
    bandwidth, host_runs.py host_soc_toml), the DRAM read of 2 GiB."""
    import platform

    import psutil

    from harmony_ref.backends.host_timing import (
        cpu_flags,
        cpu_freq_mhz,
        cpu_id,
        onchip_buffer_bytes,
    )

    l3 = _l3_size()
    out = {
        "cpu": platform.processor() or platform.machine(),
        "lscpu_model": lscpu_model(),
        "cpu_id": cpu_id(),
        "flags": sorted(cpu_flags()),
        "l2_bytes": onchip_buffer_bytes(),
        "l3": l3,
        "cpu_freq_mhz": cpu_freq_mhz(),
        "ram_bytes": psutil.virtual_memory().total,
    }
    l3_bytes = int(cache_size_bytes(l3)) // 2
    for t in (1, 2):
        out[f"cache_read_gbps_t{t}"] = stream_gbps(cache_bytes, t)
        if l3_bytes:
            out[f"l3_read_gbps_t{t}"] = stream_gbps(l3_bytes, t)
        out[f"dram_read_gbps_t{t}"] = stream_gbps(dram_bytes, t, repeats=3)
        out[f"parallel_call_us_t{t}"] = sync_us(t)
    out["fp16_widen_ns_per_weight"] = widen_ns_per_weight()  # NumPy's cast: one thread
    if (os.cpu_count() or 1) >= 2:
        out["gemm_thread_share"] = gemm_thread_share()
    numba.set_num_threads(1)
    return out


def run_config(model: str, policy: str, prompt: int, new: int, context: int):
    """The RunConfig of a host run of the checkpoint `model`."""
    from harmony_ref.calibrate.points import checkpoint_spec
    from harmony_ref.config import RunConfig

    return RunConfig.from_names(
        checkpoint_spec(model), policy, prompt, new, context, checkpoint=model
    )


def profile_run(
    model: str, policy: str, prompt: int, contexts, threads: int, repeats: int = PROFILE_REPEATS
) -> dict:
    """Per-call profiles of a prefill of `prompt` tokens and of decode steps at each context."""
    from harmony_ref._threads import set_threads
    from harmony_ref.backends.host_llm import prompt_ids
    from harmony_ref.calibrate.decoder_ops import profile_forward
    from harmony_ref.compress import compress
    from harmony_ref.runtime.llama import Llama
    from harmony_ref.runtime.loader import load_decoder_shared

    set_threads(threads)
    w, tok = load_decoder_shared(model)
    m = Llama(compress(w, policy), policy, max_context=max(contexts) + 16)
    out: dict = {"prefill": [], "decode": {}}
    ids = prompt_ids(tok, max(contexts) + 8)
    for rep in range(repeats + 1):  # the first is a warm-up (compilation)
        m.reset()
        p = profile_forward(m, ids[:prompt])
        if rep:
            out["prefill"].append(p)
    for c in contexts:
        steps = []
        m.reset()
        m.prefill(ids[: c - 1])
        profile_forward(m, [5])  # warm-up at this context
        m.reset()
        m.prefill(ids[: c - 1])
        for _ in range(repeats):
            steps.append(profile_forward(m, [5]))  # attends to c, c + 1, ... positions
        out["decode"][str(c)] = steps
    return out


def whole_run(
    model: str, policy: str, prompt: int, new: int, context: int, threads: int, repeats: int = 5
) -> dict:
    """A real generation timed end to end (backends/host_llm.py): medians and samples."""
    from harmony_ref._threads import set_threads
    from harmony_ref.backends.host_llm import measure_checkpoint

    set_threads(threads)
    m, prov = measure_checkpoint(
        run_config(model, policy, prompt, new, context), warmup=1, repeats=repeats
    )
    pick = ("prefill_ms", "decode_step_ms", "ttft_ms", "e2e_ms")
    return {k: {"value": m.value(k), "samples": list(m[k].samples)} for k in pick} | {
        "threads": numba.get_num_threads(),
        "provenance": prov,
    }


def measure_session(
    runs, model: str, repeats: int = 5, profile_repeats: int = PROFILE_REPEATS, progress=None
) -> dict:
    """Measure every run of `runs` (calibrate/host_runs.py HostRun) on this machine: one
    session dict (the module docstring). `progress(label)` is called before each step."""
    report = progress or (lambda label: None)
    t0 = time.time()
    report("microbenchmarks: cache and DRAM reads, parallel calls")
    data: dict = {"machine": machine(), "runs": {}, "profiles": {}}
    for run in runs:
        report(f"{run.id}: {run.policy}, {run.prompt_tokens} + {run.new_tokens} tokens")
        args = (run.policy, run.prompt_tokens, run.new_tokens, run.context_tokens, run.threads)
        data["runs"][run.id] = whole_run(model, *args, repeats=repeats)
        if run.profile_contexts:
            report(f"{run.id}: per-call profile")
            data["profiles"][run.id] = profile_run(
                model,
                run.policy,
                run.prompt_tokens,
                run.profile_contexts,
                run.threads,
                profile_repeats,
            )
    numba.set_num_threads(1)
    data["seconds"] = time.time() - t0
    return data
