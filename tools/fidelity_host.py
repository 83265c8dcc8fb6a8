"""The host measurements `harmony-ref fidelity` fits the `harmony-ref-host` runtime on and scores it
against: real SmolLM2-135M generations through runtime/llama.py, timed end to end, plus a per-call
profile of real prefill and decode steps for the fit runs, plus this machine's microbenchmarks
(streaming reads from cache and from DRAM at 1 and 2 threads, a parallel call's sync cost).

    /work/bin/quiet python tools/fidelity_host.py --out harmony_ref/data/fidelity/host/s1.json

Which runs are fitted and which are scored is data (harmony_ref/data/fidelity/host.toml), so
the split is fixed before any fit. Every run is RUNS[id] = (policy, prompt, new, context,
threads); the ones in PROFILED also get the per-call profile (decoder_ops.profile_forward) of
a prefill and of decode steps at two contexts. Run it under /work/bin/quiet: nothing else may
share the two cores.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numba
import numpy as np

RUNS = {
    "fit-int4g32-p128": ("int4-g32", 128, 32, 512, 1),
    "fit-int8-p64": ("int8", 64, 32, 512, 1),
    "fit-fp16-p32": ("fp16", 32, 16, 256, 1),
    "int4g32-p128-t2": ("int4-g32", 128, 64, 512, 2),
    "int4g128-p256": ("int4-g128", 256, 32, 1024, 1),
    "int8-p512": ("int8", 512, 32, 1024, 1),
    "fp16-p64-n64": ("fp16", 64, 64, 256, 1),
    "int4g32-p1024": ("int4-g32", 1024, 32, 2048, 1),
    "int8-p128-t2": ("int8", 128, 32, 512, 2),
    "int4g128-p32-n96": ("int4-g128", 32, 96, 256, 1),
}
PROFILED = {"fit-int4g32-p128": (128, 768), "fit-int8-p64": (64, 512), "fit-fp16-p32": (32, 256)}
PROFILE_REPEATS = 5


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


def stream_gbps(nbytes: int, threads: int, repeats: int = 7) -> float:
    numba.set_num_threads(threads)
    a = np.ones(nbytes // 8, dtype=np.float64)
    _psum(a)
    best = min(_timed(lambda: _psum(a)) for _ in range(repeats))
    return nbytes / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def sync_us(threads: int, repeats: int = 2000) -> float:
    numba.set_num_threads(threads)
    a = np.zeros(64)
    _pnop(a)
    t = [_timed(lambda: _pnop(a)) for _ in range(repeats)]
    return statistics.median(t) * 1e6


def widen_ns_per_weight(rows: int = 4096, k: int = 576, repeats: int = 21) -> float:
    """ns per weight of runtime/llama.py's fp16 widening (float16 rows -> float32, one
    F16_CHUNK_ROWS chunk of a SmolLM2-wide matrix), best of `repeats`: the per-call pass the
    harmony-ref-host runtime's [overhead] fp16_widen_ns_per_weight prices."""
    w16 = np.random.default_rng(0).standard_normal((rows, k)).astype(np.float16)
    w16.astype(np.float32)
    best = min(_timed(lambda: w16.astype(np.float32)) for _ in range(repeats))
    return best / (rows * k) * 1e9


def machine() -> dict:
    from harmony_ref.backends.host_timing import cpu_flags, cpu_freq_mhz, onchip_buffer_bytes

    l3 = open("/sys/devices/system/cpu/cpu0/cache/index3/size").read().strip()
    out = {
        "cpu": platform.processor() or platform.machine(),
        "lscpu_model": _lscpu(),
        "flags": sorted(cpu_flags()),
        "l2_bytes": onchip_buffer_bytes(),
        "l3": l3,
        "cpu_freq_mhz": cpu_freq_mhz(),
    }
    for t in (1, 2):
        out[f"cache_read_gbps_t{t}"] = stream_gbps(64 << 20, t)
        out[f"dram_read_gbps_t{t}"] = stream_gbps(2 << 30, t, repeats=3)
        out[f"parallel_call_us_t{t}"] = sync_us(t)
    out["fp16_widen_ns_per_weight"] = widen_ns_per_weight()  # NumPy's cast: one thread
    return out


def _lscpu() -> str:
    import subprocess

    text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    keep = ("Model name", "CPU family", "Model:")
    return "; ".join(
        line.split(":", 1)[0].strip() + "=" + line.split(":", 1)[1].strip()[:60]
        for line in text.splitlines()
        if line.startswith(keep)
    )


def config_of(policy, prompt, new, context):
    from harmony_ref.config import RunConfig
    from harmony_ref.runtime.loader import checkpoint_spec

    return RunConfig.from_names(
        checkpoint_spec("smollm2-135m"), policy, prompt, new, context, checkpoint="smollm2-135m"
    )


def profile_run(policy, prompt, contexts, threads) -> dict:
    from harmony_ref._threads import set_threads
    from harmony_ref.backends.host_llm import prompt_ids
    from harmony_ref.calibrate.decoder_ops import profile_forward
    from harmony_ref.runtime.llama import Llama
    from harmony_ref.runtime.loader import load_decoder_shared

    set_threads(threads)
    w, tok = load_decoder_shared("smollm2-135m")
    m = Llama(w, policy, max_context=max(contexts) + 16)
    out = {"prefill": [], "decode": {}}
    ids = prompt_ids(tok, max(contexts) + 8)
    for rep in range(PROFILE_REPEATS + 1):  # the first is a warm-up (compilation)
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
        for _ in range(PROFILE_REPEATS):
            steps.append(profile_forward(m, [5]))  # attends to c, c + 1, ... positions
        out["decode"][str(c)] = steps
    return out


def whole_run(policy, prompt, new, context, threads) -> dict:
    from harmony_ref._threads import set_threads
    from harmony_ref.backends.host_llm import measure_checkpoint

    set_threads(threads)
    m, prov = measure_checkpoint(config_of(policy, prompt, new, context), warmup=1, repeats=5)
    pick = ("prefill_ms", "decode_step_ms", "ttft_ms", "e2e_ms")
    return {k: {"value": m.value(k), "samples": list(m[k].samples)} for k in pick} | {
        "threads": numba.get_num_threads(),
        "provenance": prov,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated run ids (default all)")
    args = ap.parse_args()
    only = [r for r in args.only.split(",") if r] or list(RUNS)
    t0 = time.time()
    data = {"machine": machine(), "runs": {}, "profiles": {}}
    print(json.dumps(data["machine"], indent=1))
    for rid in only:
        policy, prompt, new, context, threads = RUNS[rid]
        data["runs"][rid] = whole_run(policy, prompt, new, context, threads)
        r = data["runs"][rid]
        print(
            rid,
            f"prefill {r['prefill_ms']['value']:.1f} ms, step {r['decode_step_ms']['value']:.2f} ms",
        )
        if rid in PROFILED:
            data["profiles"][rid] = profile_run(policy, prompt, PROFILED[rid], threads)
    data["seconds"] = time.time() - t0
    with open(args.out, "w") as f:
        json.dump(data, f, indent=1)


if __name__ == "__main__":
    main()
