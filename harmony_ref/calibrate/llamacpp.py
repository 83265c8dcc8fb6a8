"""The llama.cpp set: llama.cpp on this kind of machine as a device under test. Raw `llama-bench
-o json` outputs of SmolLM2-135M's GGUF (tools/fidelity_llamacpp.py, committed under
harmony_ref/data/fidelity/llamacpp/), listed with their split in harmony_ref/data/fidelity/
llamacpp.toml, so the fit and its scoring are tested without llama.cpp.

    manifest = load_llamacpp_manifest()
    points = llamacpp_points(manifest)          # one per llama-bench test and session
    rt, report = fit_llamacpp_runtime(manifest)   # the llama.cpp-host runtime on the fit runs

A prompt test (pp N after D cached tokens, `-d D`) is a prefill of N new tokens over D + N
positions (`prefix_tokens` = D); a generation test (tg N after D) is N decode steps attending to
D + 1 .. D + N positions, its `decode_step_ms` = avg_ns / N. A GGUF quant type is priced as the
policy the manifest maps it to (Q4_1 as int4-g32, Q8_0 as int8: an approximation of a few
percent of the bytes, named in the manifest). The measurement of a run is the median over
sessions; every session's value is kept (the run-to-run spread).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from harmony_ref._schema import from_table
from harmony_ref.calibrate.points import SPLITS, Point

LLAMACPP_MANIFEST = "llamacpp.toml"
MODEL = "smollm2-135m"


@dataclass(frozen=True)
class Quant:
    name: str  # the GGUF type as the fixture ids spell it (q4_1, q8_0)
    policy: str
    note: str = ""


@dataclass(frozen=True)
class BenchRun:
    id: str  # the fixture file is <session>-<id>.json
    quant: str
    split: str = field(metadata={"choices": SPLITS})
    differs_in: str = ""


@dataclass(frozen=True)
class LlamacppManifest:
    profile: str
    runtime: str
    build: str
    folder: str  # beside this file
    sessions: tuple[str, ...]
    quant: tuple[Quant, ...]
    run: tuple[BenchRun, ...]
    fit_params: tuple[str, ...] = ("matmul", "cache", "attention", "launch_us")
    machine: str = ""  # the CPU the fixtures were measured on
    cpu_id: str = ""  # that CPU as backends/host_timing.py cpu_id names one
    source: str = field(default="", compare=False)


def load_llamacpp_manifest(path=None) -> LlamacppManifest:
    from harmony_ref._toml import loads

    p = (
        Path(path)
        if path
        else Path(str(resources.files("harmony_ref") / "data" / "fidelity")) / LLAMACPP_MANIFEST
    )
    if not p.is_file():
        raise ValueError(f"llama.cpp set manifest {p} does not exist")
    m = from_table(LlamacppManifest, loads(p.read_text(), str(p)), str(p))
    object.__setattr__(m, "source", str(p))
    quants = {q.name for q in m.quant}
    for i, r in enumerate(m.run):
        if r.quant not in quants:
            raise ValueError(
                f"{p}: field 'run[{i}].quant' = {r.quant!r}: not a [[quant]] name "
                f"({sorted(quants)})"
            )
    return m


def _tests(manifest: LlamacppManifest, run: BenchRun) -> list[dict]:
    from harmony_ref.lab.parsers import llama_bench_tests

    base = Path(manifest.source).parent / manifest.folder
    out = []
    for s in manifest.sessions:
        f = base / f"{s}-{run.id}.json"
        if f.is_file():
            tests = llama_bench_tests(f.read_text())
            if len(tests) != 1:
                raise ValueError(f"{f}: expected one llama-bench test, got {len(tests)}")
            out.append(tests[0])
    if not out:
        raise ValueError(f"{manifest.source}: run {run.id!r} has no fixture in {base}")
    return out


def _config_and_metric(test: dict, policy: str):
    from harmony_ref.calibrate.points import checkpoint_spec
    from harmony_ref.config import RunConfig

    spec = checkpoint_spec(MODEL)
    depth, n_prompt, n_gen = int(test.get("n_depth", 0)), int(test["n_prompt"]), int(test["n_gen"])
    if n_prompt and not n_gen:  # pp: the new rows after `depth` cached ones
        prompt = depth + n_prompt
        cfg = RunConfig.from_names(
            spec, policy, prompt, 1, max(prompt + 1, 512), prefix_tokens=depth, checkpoint=MODEL
        )
        return cfg, "prefill_ms", float(test["avg_ns"]) / 1e6
    if n_gen and not n_prompt:  # tg: n_gen steps after `depth` cached tokens
        prompt = max(depth, 1)
        cfg = RunConfig.from_names(
            spec, policy, prompt, n_gen, max(prompt + n_gen, 512), checkpoint=MODEL
        )
        return cfg, "decode_step_ms", float(test["avg_ns"]) / 1e6 / n_gen
    raise ValueError(f"llama-bench test pp{n_prompt}/tg{n_gen}: expected a pp or a tg test")


def llamacpp_points(manifest: LlamacppManifest | None = None) -> list[Point]:
    manifest = manifest or load_llamacpp_manifest()
    quants = {q.name: q for q in manifest.quant}
    out = []
    for run in manifest.run:
        tests = _tests(manifest, run)
        cfg, metric, _ = _config_and_metric(tests[0], quants[run.quant].policy)
        vals = [_config_and_metric(t, quants[run.quant].policy)[2] for t in tests]
        threads = int(tests[0]["n_threads"])
        out.append(
            Point(
                run.id,
                "llama.cpp",
                manifest.profile,
                manifest.runtime,
                threads,
                cfg,
                metric,
                statistics.median(vals),
                run.split,
                source=f"llama-bench {tests[0].get('build_commit', '?')}, {len(vals)} "
                "session(s): " + ", ".join(f"{v:.4g}" for v in vals),
                samples=tuple(vals),
                note=run.differs_in,
            )
        )
    return out


def fit_llamacpp_runtime(manifest: LlamacppManifest | None = None):
    """The llama.cpp-host runtime fitted on the manifest's fit runs (calibrate/fit_runtime.py)."""
    from harmony_ref.calibrate.fit_runtime import calibrated, fit_on_points
    from harmony_ref.device.runtime import load_runtime

    manifest = manifest or load_llamacpp_manifest()
    points = llamacpp_points(manifest)
    fit_pts = [p for p in points if p.split == "fit"]
    rt, report = fit_on_points(load_runtime(manifest.runtime), fit_pts, manifest.fit_params)
    rt = calibrated(
        rt,
        f"least squares on log error over {list(report.fitted)} "
        "(calibrate/fit_runtime.py) on llama-bench fit runs",
        [p.id for p in fit_pts],
        [p.id for p in points if p.split == "score"],
        report.fit_mape_pct,
    )
    return rt, report
