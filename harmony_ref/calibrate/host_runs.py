"""The host set: real SmolLM2-135M generations on this kind of machine (runtime/llama.py, timed
end to end by backends/host_llm.py), the per-call profiles of the fit runs, and the machine's
microbenchmarks, recorded by tools/fidelity_host.py into the committed fixtures that
harmony_ref/data/fidelity/host.toml lists with the split of every run.

    manifest = load_host_manifest()
    points = host_points(manifest)                 # prefill_ms and decode_step_ms per run
    rt, info = fit_host_runtime(manifest)          # the harmony-ref-host runtime, fitted
    text = host_soc_toml(manifest)                 # the SoC profile of this machine, measured

The fit uses only the runs marked "fit": their per-call profiles (calibrate/decoder_ops.py) give
one OpSample per call kind and step, fitted per class by calibrate/fit.py's NNLS (int4, int8,
fp16 matmuls, attention, vector ops, the per-call overhead, the bandwidth the weights are read
at: the cache's, since SmolLM2 fits this machine's L3); the per-forward overhead (generation's
own loop: sampling, the argmax over the vocabulary) is the mean gap between the fit runs'
measured decode steps and the model without it. The rates become efficiencies against the SoC
profile's one-core peaks, so 2 threads are predicted from the SoC (two cores, the measured
2-thread cache read and the parallel call's sync cost), never from a 2-thread run.
With several sessions, a run's measurement is the median over sessions and the spread between
them (max / min - 1) is kept: the run-to-run spread the gate tolerance derives from.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from harmony_ref._schema import from_table
from harmony_ref.calibrate.points import SPLITS, Point

HOST_MANIFEST = "host.toml"
HOST_MODEL = "smollm2-135m"
HOST_METRICS = ("prefill_ms", "decode_step_ms")


@dataclass(frozen=True)
class HostRun:
    id: str
    policy: str
    prompt_tokens: int = field(metadata={"min": 1})
    new_tokens: int = field(metadata={"min": 2})
    context_tokens: int = field(metadata={"min": 2})
    threads: int = field(metadata={"min": 1})
    split: str = field(metadata={"choices": SPLITS})
    differs_in: str = ""  # what a scored run varies against the fit runs
    # a fit run's per-call profile: its prefill, and decode steps at these contexts
    profile_contexts: tuple[int, ...] = field(default=(), metadata={"min": 2})
    quick: bool = False  # measured by `calibrate --backend host --quick` too


@dataclass(frozen=True)
class HostManifest:
    profile: str  # the SoC profile of the machine the fixtures were measured on
    runtime: str
    sessions: tuple[str, ...]  # fixture files (tools/fidelity_host.py outputs), beside this file
    run: tuple[HostRun, ...]
    cpu: str = ""
    model: str = HOST_MODEL  # the checkpoint every run generates with
    # the CPU as backends/host_timing.py cpu_id names one: what a run on another CPU is told
    cpu_id: str = ""
    source: str = field(default="", compare=False)
    # sessions measured in this process (calibrate --backend host), in place of the files
    session_data: tuple = field(default=(), compare=False)


def _data_dir() -> Path:
    return Path(str(resources.files("harmony_ref") / "data" / "fidelity"))


def load_host_manifest(path=None) -> HostManifest:
    from harmony_ref._toml import loads

    p = Path(path) if path else _data_dir() / HOST_MANIFEST
    if not p.is_file():
        raise ValueError(f"host set manifest {p} does not exist")
    m = from_table(HostManifest, loads(p.read_text(), str(p)), str(p))
    object.__setattr__(m, "source", str(p))
    for s in m.sessions:
        if not (p.parent / s).is_file():
            raise ValueError(f"{p}: field 'sessions' names {s!r}: no such file beside it")
    return m


def sessions(manifest: HostManifest) -> list[dict]:
    if manifest.session_data:
        return list(manifest.session_data)
    base = Path(manifest.source).parent
    return [json.loads((base / s).read_text()) for s in manifest.sessions]


def run_config(run: HostRun, model: str = HOST_MODEL):
    from harmony_ref.calibrate.host_measure import run_config as config

    return config(model, run.policy, run.prompt_tokens, run.new_tokens, run.context_tokens)


def run_values(manifest: HostManifest, run_id: str, metric: str) -> list[float]:
    """The metric of one run in every session that measured it (each a median of repeats)."""
    return [s["runs"][run_id][metric]["value"] for s in sessions(manifest) if run_id in s["runs"]]


def host_points(manifest: HostManifest | None = None) -> list[Point]:
    manifest = manifest or load_host_manifest()
    out = []
    for run in manifest.run:
        cfg = run_config(run, manifest.model)
        for metric in HOST_METRICS:
            vals = run_values(manifest, run.id, metric)
            if not vals:
                raise ValueError(f"{manifest.source}: run {run.id!r} was measured in no session")
            out.append(
                Point(
                    f"{run.id}:{metric}",
                    "host",
                    manifest.profile,
                    manifest.runtime,
                    run.threads,
                    cfg,
                    metric,
                    statistics.median(vals),
                    run.split,
                    source=f"{len(vals)} session(s): " + ", ".join(f"{v:.4g}" for v in vals),
                    samples=tuple(vals),
                    note=run.differs_in,
                )
            )
    return out


def fit_samples(manifest: HostManifest):
    """OpSamples of every profiled fit run (each call kind, each profiled step, median over
    repeats and sessions)."""
    from harmony_ref.calibrate.decoder_ops import call_samples

    out = []
    runs = {r.id: r for r in manifest.run}
    for sess_i, s in enumerate(sessions(manifest)):
        for rid, prof in s.get("profiles", {}).items():
            run = runs.get(rid)
            if run is None or run.split != "fit":
                continue  # a profile of a run that is not fitted on is never used
            cfg = run_config(run, manifest.model)
            steps = [("prefill", run.prompt_tokens, run.prompt_tokens, prof["prefill"])]
            steps += [("decode", 1, int(c), reps) for c, reps in prof["decode"].items()]
            for phase, tokens, context, reps in steps:
                kinds = reps[0]["s"]
                seconds = {k: statistics.median(r["s"][k] for r in reps) for k in kinds}
                out += call_samples(
                    cfg, phase, tokens, context, seconds, reps[0]["calls"], tag=f"s{sess_i}:{rid}:"
                )
    return out


def _profiles(manifest: HostManifest):
    """(run, phase, tokens, context, [repeats]) of every profiled step of the fit runs."""
    runs = {r.id: r for r in manifest.run}
    for s in sessions(manifest):
        for rid, prof in s.get("profiles", {}).items():
            run = runs.get(rid)
            if run is None or run.split != "fit":
                continue  # a profile of a run that is not fitted on is never used
            yield run, "prefill", run.prompt_tokens, run.prompt_tokens, prof["prefill"]
            for c, reps in prof["decode"].items():
                yield run, "decode", 1, int(c), reps


def profiled_points(manifest: HostManifest) -> list[Point]:
    """Each profiled forward of a fit run (median over repeats) as a kernels-only point: a
    prefill of the prompt, a decode step at the profiled context."""
    from harmony_ref.calibrate.points import checkpoint_spec
    from harmony_ref.config import RunConfig

    out = []
    for i, (run, phase, _tokens, context, reps) in enumerate(_profiles(manifest)):
        prompt = context if phase == "prefill" else context - 1
        cfg = RunConfig.from_names(
            checkpoint_spec(manifest.model),
            run.policy,
            prompt,
            1,
            max(run.context_tokens, prompt + 1),
            checkpoint=manifest.model,
        )
        metric = "prefill_ms" if phase == "prefill" else "decode_step_ms"
        value = statistics.median(r["forward_s"] for r in reps) * 1e3
        out.append(
            Point(
                f"{run.id}:{phase}@{context}:profiled#{i}",
                "host",
                manifest.profile,
                manifest.runtime,
                run.threads,
                cfg,
                metric,
                value,
                "fit",
                source="per-call profile (decoder_ops.profile_forward)",
                kernels_only=True,
            )
        )
    return out


def glue_us(manifest: HostManifest) -> list[float]:
    """Per fit run and session: its measured decode step (generation) minus its profiled decode
    forward at the lowest profiled context (the same contexts within a few tokens), in us."""
    out = []
    for s in sessions(manifest):
        for run in manifest.run:
            prof = s.get("profiles", {}).get(run.id)
            if run.split != "fit" or prof is None or run.id not in s["runs"]:
                continue
            c = min(prof["decode"], key=int)
            forward = statistics.median(r["forward_s"] for r in prof["decode"][c])
            out.append((s["runs"][run.id]["decode_step_ms"]["value"] / 1e3 - forward) * 1e6)
    return out


def _machine(manifest: HostManifest) -> dict:
    """The machine's microbenchmarks: per key, the best over sessions (the least disturbed)."""
    ms = [s["machine"] for s in sessions(manifest)]
    keys = [k for k, v in ms[0].items() if isinstance(v, (int, float))]
    out = dict(ms[0])
    for k in keys:
        vals = [m[k] for m in ms if isinstance(m.get(k), (int, float))]
        lower_is_better = k.startswith("parallel_call") or k.endswith("_ns_per_weight")
        out[k] = min(vals) if lower_is_better else max(vals)
    return out


def core_peaks(machine: dict) -> dict[str, float]:
    """Nominal one-core peaks (ops/s) of this CPU from its flags and frequency
    (calibrate/write.py nominal_host_peaks: 2 FMA pipes, lanes of the widest vector ISA, VNNI)."""
    from harmony_ref.calibrate.write import nominal_host_peaks

    flags = set(machine.get("flags", []))
    return nominal_host_peaks(machine.get("cpu_freq_mhz") or 2000.0, 1, flags)


def widen_from_decode(samples, cache_read_bytes_per_s: float) -> float | None:
    """ns per weight of the fp16 widening pass, from the fit runs' own decode calls (sessions
    without the widen microbenchmark): an fp16 decode matmul call is the widening plus a GEMV
    over the float32 copy it just wrote, which is memory-bound at the measured cache read (4 B
    per weight); the widening is the rest. Median over the fp16 GEMV samples; None without any."""
    per = [
        s.time_s / s.launches / (s.nbytes / 2 / s.launches) - 4.0 / cache_read_bytes_per_s
        for s in samples
        if s.rate_class == "gemv_fp16" and s.nbytes > 0
    ]
    return max(0.0, statistics.median(per)) * 1e9 if per else None


def fit_host_runtime(manifest: HostManifest | None = None):
    """(the fitted harmony-ref-host RuntimeProfile, a dict of what was fitted and how well)."""
    import dataclasses

    from harmony_ref.calibrate.fit import RATE_CLASSES, fit, seed_rates
    from harmony_ref.calibrate.fit_runtime import calibrated, fit_on_points
    from harmony_ref.device.runtime import load_runtime
    from harmony_ref.metrics import mape_pct
    from harmony_ref.units import GB, US_PER_S

    manifest = manifest or load_host_manifest()
    samples = fit_samples(manifest)
    if not samples:
        raise ValueError(f"{manifest.source}: no per-call profile of a fit run: nothing to fit")
    machine = _machine(manifest)
    f = fit(
        samples, seed_bandwidth=machine["cache_read_gbps_t1"] * GB, seed_rates=seed_rates(samples)
    )
    peaks = core_peaks(machine)
    cache_t1 = machine["cache_read_gbps_t1"] * GB

    # each fitted class's rate against its one-core peak (attention: fp16's; device/soc.py
    # class_peak_ops_per_s); a class no sample had keeps its fallback (soc.py FALLBACK)
    def peak_of(c):
        if c == "vector":
            return peaks["vector"]
        return peaks["fp16"] if c.startswith("attention") else peaks[c.rpartition("_")[2]]

    eff = {c: min(1.0, f.rates[c] / peak_of(c)) for c in f.fitted if c in RATE_CLASSES}
    eff["cache"] = min(1.0, f.bandwidth_bytes_per_s / cache_t1)
    base = load_runtime(manifest.runtime)
    rt = dataclasses.replace(
        base,
        efficiency=dataclasses.replace(
            base.efficiency,
            matmul=eff.get("int4", base.efficiency.matmul),
            memory=eff["cache"],
            **eff,
        ),
        overhead=dataclasses.replace(
            base.overhead, launch_us=f.launch_s * US_PER_S, forward_us=0.0
        ),
    )
    # the per-forward overhead: generation's loop beyond the kernels (sampling, the argmax over
    # the vocabulary), measured: a fit run's decode step minus its profiled forward
    fit_points = [p for p in host_points(manifest) if p.split == "fit"]
    forward_us = max(0.0, statistics.median(glue_us(manifest)))
    # refined on the profiled forwards (kernels only), starting from the per-call fit
    forwards = profiled_points(manifest)
    params = tuple(c for c in eff if c != "cache") + ("cache", "launch_us")
    # the fp16 widening pass is measured (the sessions' machine microbenchmark) or the runtime's
    # prior, never fitted: with one fp16 prompt length in the fit set it trades off against the
    # fp16 GEMM rate (any value fits the fit runs equally well)
    widen_ns = machine.get("fp16_widen_ns_per_weight", widen_from_decode(samples, cache_t1))
    if widen_ns is not None and rt.overhead.fp16_widen_ns_per_weight:
        rt = dataclasses.replace(
            rt, overhead=dataclasses.replace(rt.overhead, fp16_widen_ns_per_weight=widen_ns)
        )
    rt, report = fit_on_points(rt, forwards, params, multistart=False)
    rt = dataclasses.replace(rt, overhead=dataclasses.replace(rt.overhead, forward_us=forward_us))
    pairs = [(p.predicted(rt), p.measured) for p in fit_points]
    scored = [p.id for p in host_points(manifest) if p.split == "score"]
    rt = calibrated(
        rt,
        "per-call profiles of the fit runs' prefill and decode steps: NNLS per "
        "class, refined on the profiled forwards (calibrate/host_runs.py)",
        [p.id for p in fit_points],
        scored,
        mape_pct(pairs),
    )
    info = {
        "samples": len(samples),
        "rates_gops": {k: v / 1e9 for k, v in f.rates.items()},
        "bandwidth_gbps": f.bandwidth_bytes_per_s / GB,
        "launch_us": f.launch_s * US_PER_S,
        "forward_us": forward_us,
        "fitted": list(f.fitted),
        "per_call_efficiency": eff,
        "refined": list(report.fitted),
        "profiled_forward_fit_mape_pct": report.fit_mape_pct,
        "per_call_fit_mape_pct": mape_pct((f.predict_s(s), s.time_s) for s in samples),
        "fit_runs_mape_pct": mape_pct(pairs),
        "machine": machine,
    }
    return rt, info


def host_soc_toml(
    manifest: HostManifest | None = None,
    name: str = "",
    default_runtime: str = "",
    written_by: str = "",
) -> str:
    """The SoC profile of the machine the sessions were measured on: every number measured
    (calibrate/host_measure.py machine()) or derived from lscpu flags, thermal borrowed (not
    calibrated). `name` and `default_runtime` default to the manifest's profile and runtime;
    `written_by` names what measured it (default: the committed fixtures)."""
    from harmony_ref._toml import read_toml
    from harmony_ref.calibrate.write import THERMAL_TEMPLATE, toml_table
    from harmony_ref.device.soc import PROFILES_FOLDER

    manifest = manifest or load_host_manifest()
    m = _machine(manifest)
    peaks = core_peaks(m)
    ghz = (m.get("cpu_freq_mhz") or 2000.0) / 1000
    from harmony_ref.calibrate.host_measure import cache_size_bytes

    l3_mb = cache_size_bytes(m["l3"]) / 1e6
    cache_read = l3_read_gbps(m)
    sync = max(0.0, m["parallel_call_us_t2"] - m["parallel_call_us_t1"])
    thermal = read_toml("profile", PROFILES_FOLDER, THERMAL_TEMPLATE)[0]["thermal"]
    where = written_by or f"microbenchmarks in {', '.join(manifest.sessions)}"
    what = "this machine" if written_by else "the machine of the fidelity fixtures"
    ram_gb = m.get("ram_bytes", 24 * 1024**3) / 1024**3
    guest = " (KVM guest)" if "hypervisor" in m.get("flags", []) else ""
    head = "\n".join(
        [
            "# This machine as a SoC profile, written by harmony_ref/calibrate/host_runs.py from the",
            f"# {where} ({manifest.cpu}).",
            toml_table(
                "",
                [
                    ("name", name or manifest.profile, ""),
                    ("description", f"{manifest.cpu}; no NPU: {what}", ""),
                    ("soc", f"host CPU{guest}", ""),
                    ("default_runtime", default_runtime or manifest.runtime, ""),
                ],
            ),
        ]
    )
    compute = toml_table(
        "compute",
        [
            ("cube_fp16_tops", 0.0, "no NPU"),
            ("cube_int8_tops", 0.0, "no NPU"),
            ("cube_int4_tops", 0.0, "no NPU"),
            (
                "vector_fp16_gflops",
                2 * peaks["vector"] / 1e9,
                "2 cores x the nominal fp32 SIMD peak",
            ),
            (
                "cpu_fp16_gflops",
                2 * peaks["fp16"] / 1e9,
                "2 cores x nominal (calibrate/write.py nominal_host_peaks)",
            ),
            (
                "cpu_int8_gops",
                2 * peaks["int8"] / 1e9,
                "2 cores x nominal (VNNI when the flags have it)",
            ),
            ("cpu_int4_gops", 2 * peaks["int4"] / 1e9, "2 cores x nominal (int4 unpacked to int8)"),
        ],
    )
    memory = toml_table(
        "memory",
        [
            ("dram_type", "host DRAM", ""),
            (
                "dram_bandwidth_gbps",
                m["dram_read_gbps_t2"],
                "measured: 2-thread read of 2 GiB (larger than the L3)",
            ),
            ("onchip_buffer_kib", m["l2_bytes"] / 1024, "measured: L2 of cpu0 (sysfs)"),
            (
                "ram_gb",
                round(ram_gb, 1),
                "measured: the machine's memory (psutil), GiB"
                if "ram_bytes" in m
                else "the machine's 24 GiB, as free -g reports it (rounded)",
            ),
            ("app_memory_share", 0.5, "assumption"),
            (
                "runtime_workspace_mb",
                0.0,
                "assumption (a runtime profile's workspace_mb replaces it)",
            ),
            ("cache_mb", l3_mb, f"measured: L3 {m['l3']} (sysfs)"),
            ("cache_bandwidth_gbps", *cache_read[2]),
            ("core_cache_gbps", *cache_read[1]),
            ("cpu_read_gbps", m["dram_read_gbps_t2"], "measured: 2-thread read of 2 GiB"),
            ("core_read_gbps", m["dram_read_gbps_t1"], "measured: 1-thread read of 2 GiB"),
        ],
    )
    runtime = toml_table(
        "runtime",
        [
            ("storage_read_gbps", 1.0, "assumption: not measured"),
            ("npu_init_ms", 0.0, "no NPU"),
            ("graph_parse_ms_per_mb", 0.0, "assumption: no graph compile"),
        ],
    )
    cpu = toml_table(
        "cpu",
        [
            (
                "launch_us",
                0.0,
                "unused by the runtime path (the runtime profile's launch_us applies)",
            ),
            ("sync_us_per_thread", sync, "measured: a Numba parallel call at 2 threads minus at 1"),
        ]
        + (
            [
                (
                    "thread_share",
                    m["gemm_thread_share"],
                    "measured: the int8 prefill GEMMs' 2-thread speedup minus 1 (host_measure.py)",
                )
            ]
            if "gemm_thread_share" in m
            else []
        ),
    )
    cluster = toml_table(
        "[cpu.clusters]",
        [
            ("name", "core", ""),
            ("cores", 2, "lscpu"),
            ("freq_ghz", ghz, "psutil cpu_freq"),
            (
                "fp16_flops_per_cycle",
                peaks["fp16"] / (ghz * 1e9),
                "nominal: 2 FMA pipes x fp32 lanes x 2",
            ),
            (
                "int8_ops_per_cycle",
                peaks["int8"] / (ghz * 1e9),
                "nominal: VNNI 4 MACs per 32-bit lane",
            ),
            (
                "int4_ops_per_cycle",
                peaks["int4"] / (ghz * 1e9),
                "nominal: as int8 (nibbles unpacked)",
            ),
        ],
    )
    th = toml_table("thermal", [(k, v, "") for k, v in thermal.items()])
    return (
        "\n\n".join(
            [
                head,
                compute,
                memory,
                runtime,
                cpu,
                cluster,
                f"# not calibrated: {THERMAL_TEMPLATE}'s thermal constants\n" + th,
            ]
        )
        + "\n"
    )


def l3_read_gbps(m: dict) -> dict[int, tuple[float, str]]:
    """{threads: (GB/s, where from)} of the L3 reads a SoC profile's cache fields take from the
    microbenchmarks `m` (host_measure.py machine()): the reads of half the L3 where measured,
    else (older sessions) of 64 MiB, which is in the L3 only where the L3 is larger (on a 32 MiB
    L3 it is a DRAM read, and pricing the L3-resident share of a step at it made an 8da4w decode
    step memory-bound: docs/how-to/executorch.md). A second thread cannot make an idle cache
    slower to read: a 2-thread read below the 1-thread one was disturbed (the other core busy),
    and the 1-thread read stands for both."""
    if "l3_read_gbps_t1" in m:
        key, size1, size2 = "l3_read_gbps_t", "half the L3", "half the L3"
    else:
        key, size1, size2 = "cache_read_gbps_t", "64 MiB", "64 MiB (in the L3)"
    one, two = m[f"{key}1"], m[f"{key}2"]
    out = {1: (one, f"measured: 1-thread read of {size1}")}
    out[2] = (
        (two, f"measured: 2-thread read of {size2}")
        if two >= one
        else (
            one,
            f"measured: 1-thread read of {size1} (the 2-thread read, {two:.1f}, was disturbed)",
        )
    )
    return out
