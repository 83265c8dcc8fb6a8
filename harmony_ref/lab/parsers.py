"""Parsers for the real output formats of on-device benchmark tools.

Each `parse_<format>(text) -> Parsed` reads a tool's stdout as it prints it and returns metrics
with the standard names where they apply (`e2e_ms`, `ttft_ms`, `prefill_ms`, `decode_step_ms`,
`decode_tokens_per_s`, `peak_memory_mb`) plus format-specific ones, `kind="measured"` (accuracy: `exact`), raw
samples kept where the tool reports them; and the provenance the tool reports about itself
(model file, threads, CPU, build). Output without the expected lines raises `ParseError` naming
what was expected; a tool's own failure line raises it quoting that line.

Formats, as printed by (checked against the sources):
- `mslite`: MindSpore Lite tools/benchmark (benchmark.cc, benchmark_unified_api.cc):
  `printf("Model = %s, NumThreads = %d, MinRunTime = %f ms, MaxRuntime = %f ms, AvgRunTime = %f ms\\n")`,
  `PrepareTime = <f> ms`, accuracy lines `Mean bias of all nodes/tensors: <f>%` and
  `Cosine distance of all nodes/tensors: <f>`; failures end in `Run Benchmark <model> Failed : <code>`.
  `mslite_accuracy(text)` (parsers_accuracy.py) reads the comparison, even from a failed run.
- `tflite`: TensorFlow Lite / LiteRT tools/benchmark (benchmark_model.cc, benchmark_tflite_model.cc):
  `Inference timings in us: Init: <i>, First inference: <i>, Warmup (avg): <f>, Inference (avg): <f>`,
  stat lines `count=<n> first=<i> curr=<i> min=<i> max=<i> avg=<f> std=<i>` (warm-up runs, then
  timed runs), `Memory footprint delta from the start of the tool (MB): init=<f> overall=<f>`,
  `Overall peak memory footprint (MB) via periodic monitoring: <f>`; failure: `Benchmarking failed.`
  Its "MB" is max_rss_kb / 1024.0, i.e. MiB: converted here to MB (1e6 bytes) like every `_mb`.
- `llama-bench`: llama.cpp tools/llama-bench (`-o json`): a JSON array, one object per test with
  n_prompt, n_gen, avg_ns, stddev_ns, avg_ts, stddev_ts, samples_ns, samples_ts, model_type,
  cpu_info, build_commit, n_threads, ... A prompt-processing test has n_gen == 0, a generation
  test n_prompt == 0.
- `llama-perplexity`: llama.cpp tools/perplexity, parsed in parsers_accuracy.py (its formats are
  listed there).
- `harmony-ref-generate`: this project's `harmony-ref generate --json` (commands/generate.py): one
  JSON object with prompt_tokens, new_tokens, ttft_ms, prefill_tokens_per_s,
  decode_tokens_per_s, decode_steps and peak_rss_mb (getrusage ru_maxrss / 1024: MiB, converted
  here to MB like every `_mb`).
- `executorch`: ExecuTorch extension/llm/runner/stats.h, the line `PyTorchObserver {json}` with
  prompt_tokens, generated_tokens, model_load_start_ms, model_load_end_ms, inference_start_ms,
  prompt_eval_end_ms, first_token_ms, inference_end_ms, aggregate_sampling_time_ms and
  SCALING_FACTOR_UNITS_PER_SECOND (timestamps are in 1/SCALING_FACTOR seconds).
"""

from __future__ import annotations

import json
import re

from harmony_ref.lab._parse import _NUM, Parsed, ParseError, _measured, _num, _tail
from harmony_ref.lab.parsers_accuracy import (
    _MSLITE_BIAS,
    _MSLITE_COSINE,
    MsliteAccuracy,  # noqa: F401
    mslite_accuracy,  # noqa: F401
    parse_llama_perplexity,
)
from harmony_ref.metrics import Metrics
from harmony_ref.units import MB, MIB, MS_PER_S, NS_PER_S, US_PER_S

OUTPUT_FORMATS = (
    "mslite",
    "tflite",
    "llama-bench",
    "llama-perplexity",
    "executorch",
    "harmony-ref-generate",
)

MS_PER_US = MS_PER_S / US_PER_S
MS_PER_NS = MS_PER_S / NS_PER_S


# --- MindSpore Lite ------------------------------------------------------------------------------

_MSLITE_RUN = re.compile(
    r"Model = (?P<model>.*?), NumThreads = (?P<threads>\d+), MinRunTime = "
    + _NUM
    + r" ms, MaxRuntime = "
    + _NUM
    + r" ms, AvgRunTime = "
    + _NUM
    + r" ms"
)
_MSLITE_PREPARE = re.compile(r"PrepareTime = " + _NUM + r" ms")
_MSLITE_FAILED = re.compile(r"^Run Benchmark .*Failed.*$", re.M)


def parse_mslite(text: str) -> Parsed:
    failed = _MSLITE_FAILED.search(text)
    if failed:
        raise ParseError(f"mslite: benchmark reported failure: {failed.group(0).strip()!r}")
    runs = _MSLITE_RUN.findall(text)
    if not runs:
        raise ParseError(
            "mslite: expected a line 'Model = <name>, NumThreads = <n>, MinRunTime = <f> ms, "
            f"MaxRuntime = <f> ms, AvgRunTime = <f> ms'; output was: {_tail(text)!r}"
        )
    model, threads, tmin, tmax, tavg = runs[-1]
    m = Metrics()
    avg = _num(tavg, "AvgRunTime", "mslite")
    _measured(
        m, "e2e_ms", avg, "ms", description="one inference, mean over the tool's loop (AvgRunTime)"
    )
    _measured(m, "mslite_avg_run_ms", avg, "ms")
    _measured(m, "mslite_min_run_ms", _num(tmin, "MinRunTime", "mslite"), "ms")
    _measured(m, "mslite_max_run_ms", _num(tmax, "MaxRuntime", "mslite"), "ms")
    prep = _MSLITE_PREPARE.search(text)
    if prep:
        _measured(m, "mslite_prepare_ms", _num(prep.group(1), "PrepareTime", "mslite"), "ms")
    bias = _MSLITE_BIAS.search(text)
    if bias:
        _measured(
            m,
            "mslite_mean_bias_pct",
            _num(bias.group(1), "Mean bias", "mslite"),
            "%",
            description="mean relative error of the outputs vs the calibration data",
        )
    cos = _MSLITE_COSINE.search(text)
    if cos:
        # The tool prints 1 - mean(1 - cos) over output tensors: a similarity, higher is better.
        _measured(
            m,
            "mslite_cosine_distance",
            _num(cos.group(1), "Cosine distance", "mslite"),
            "1",
            "higher",
            description="as printed: mean cosine similarity of outputs vs calibration",
        )
    return Parsed(m, {"model_file": model.strip(), "num_threads": threads})


# --- TensorFlow Lite / LiteRT --------------------------------------------------------------------

_TFLITE_TIMINGS = re.compile(
    r"Inference timings in us: Init: "
    + _NUM
    + r", First inference: "
    + _NUM
    + r", Warmup \(avg\): "
    + _NUM
    + r", Inference \(avg\): "
    + _NUM
)
_TFLITE_STAT = re.compile(
    r"count=(\d+)(?: first="
    + _NUM
    + r")? curr="
    + _NUM
    + r"(?: min="
    + _NUM
    + r" max="
    + _NUM
    + r" avg="
    + _NUM
    + r" std="
    + _NUM
    + r")?"
)
_TFLITE_MEM = re.compile(
    r"Memory footprint delta from the start of the tool \(MB\): init=" + _NUM + r" overall=" + _NUM
)
_TFLITE_PEAK = re.compile(r"Overall peak memory footprint \(MB\) via periodic monitoring: " + _NUM)
_TFLITE_MODEL_SIZE = re.compile(r"The input model file size \(MB\): " + _NUM)
_TFLITE_GRAPH = re.compile(r"^(?:INFO: )?Graph: \[(.*)\]\s*$", re.M)
_TFLITE_THREADS = re.compile(r"^(?:INFO: )?#threads used for CPU inference: \[(\d+)\]", re.M)
_MIB_TO_MB = MIB / MB


def parse_tflite(text: str) -> Parsed:
    if re.search(r"^(?:ERROR: )?Benchmarking failed\.", text, re.M):
        errors = re.findall(r"^ERROR: .*$", text, re.M)
        raise ParseError(
            "tflite: benchmark_model reported 'Benchmarking failed.'"
            + (f" ({errors[-1]!r})" if errors else "")
        )
    t = _TFLITE_TIMINGS.search(text)
    if not t:
        raise ParseError(
            "tflite: expected a line 'Inference timings in us: Init: <i>, First inference: <i>, "
            f"Warmup (avg): <f>, Inference (avg): <f>'; output was: {_tail(text)!r}"
        )
    init_us, first_us, warm_us, inf_us = (
        _num(v, k, "tflite")
        for v, k in zip(t.groups(), ("Init", "First inference", "Warmup (avg)", "Inference (avg)"))
    )
    m = Metrics()
    _measured(
        m, "e2e_ms", inf_us * MS_PER_US, "ms", description="one inference, mean of the timed runs"
    )
    _measured(m, "inference_avg_ms", inf_us * MS_PER_US, "ms")
    _measured(m, "init_ms", init_us * MS_PER_US, "ms")
    _measured(m, "first_inference_ms", first_us * MS_PER_US, "ms")
    _measured(m, "warmup_avg_ms", warm_us * MS_PER_US, "ms")
    # The last full stat line before the timings line covers the timed (non-warm-up) runs.
    stats = [s for s in _TFLITE_STAT.findall(text[: t.start()]) if s[3]]
    if stats:
        count, _first, _curr, smin, smax, _savg, sstd = stats[-1]
        m.add("inference_runs", int(count), "runs", "none", "measured")
        _measured(m, "inference_min_ms", _num(smin, "min", "tflite") * MS_PER_US, "ms")
        _measured(m, "inference_max_ms", _num(smax, "max", "tflite") * MS_PER_US, "ms")
        _measured(m, "inference_std_ms", _num(sstd, "std", "tflite") * MS_PER_US, "ms")
    mem = _TFLITE_MEM.search(text)
    if mem:
        _measured(
            m, "init_memory_delta_mb", _num(mem.group(1), "init", "tflite") * _MIB_TO_MB, "MB"
        )
        _measured(
            m, "overall_memory_delta_mb", _num(mem.group(2), "overall", "tflite") * _MIB_TO_MB, "MB"
        )
    peak = _TFLITE_PEAK.search(text)
    if peak:
        _measured(
            m,
            "peak_memory_mb",
            _num(peak.group(1), "peak memory", "tflite") * _MIB_TO_MB,
            "MB",
            description="whole benchmark process, periodic monitoring (tool prints MiB)",
        )
    prov = {}
    size = _TFLITE_MODEL_SIZE.search(text)
    if size:
        # unlike the memory lines, this "MB" is decimal: MayGetModelFileSize() / 1e6
        prov["model_file_size_mb"] = size.group(1)
    graph = _TFLITE_GRAPH.search(text)
    if graph:
        prov["model_file"] = graph.group(1)
    threads = _TFLITE_THREADS.search(text)
    if threads:
        prov["num_threads"] = threads.group(1)
    return Parsed(m, prov)


# --- llama.cpp llama-bench -o json ---------------------------------------------------------------

_LLAMA_PROVENANCE = (
    "model_filename",
    "model_type",
    "model_size",
    "model_n_params",
    "cpu_info",
    "gpu_info",
    "backends",
    "build_commit",
    "build_number",
    "n_threads",
    "n_batch",
    "n_depth",
    "type_k",
    "type_v",
    "n_gpu_layers",
    "test_time",
)


def _llama_rows(text: str) -> list[dict]:
    start = text.find("[")
    if start < 0:
        raise ParseError(
            f"llama-bench: expected a JSON array (-o json); output was: {_tail(text)!r}"
        )
    try:
        rows, _end = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as e:
        raise ParseError(
            f"llama-bench: output is not valid JSON at char {start + e.pos}: {e.msg}"
        ) from e
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise ParseError("llama-bench: expected a non-empty JSON array of test objects")
    for i, r in enumerate(rows):
        missing = [k for k in ("n_prompt", "n_gen", "avg_ns", "avg_ts") if k not in r]
        if missing:
            raise ParseError(f"llama-bench: test {i} lacks field(s) {missing}")
    return rows


def llama_bench_tests(text: str) -> list[dict]:
    """The test objects of a `llama-bench -o json` output, checked (as parse_llama_bench reads
    them): n_prompt, n_gen, avg_ns, avg_ts, and n_depth (cached tokens before the test) when
    the build reports it."""
    return _llama_rows(text)


def parse_llama_bench(text: str) -> Parsed:
    rows = _llama_rows(text)
    pp = [r for r in rows if r["n_prompt"] > 0 and r["n_gen"] == 0]
    tg = [r for r in rows if r["n_gen"] > 0 and r["n_prompt"] == 0]
    if not pp and not tg:
        raise ParseError(
            "llama-bench: expected a prompt test (n_gen == 0) or a generation test "
            "(n_prompt == 0); got only combined pg tests"
        )
    m = Metrics()
    prefill_ms = step_ms = None
    if pp:
        r = pp[
            0
        ]  # with a sweep (-p 128,512) the first is reported; all rows stay in the provenance
        samples_ms = [s * MS_PER_NS for s in r.get("samples_ns", ())]
        prefill_ms = float(r["avg_ns"]) * MS_PER_NS
        depth = f" after {r['n_depth']} cached tokens" if r.get("n_depth") else ""
        _measured(
            m,
            "prefill_ms",
            prefill_ms,
            "ms",
            samples=samples_ms,
            description=f"pp{r['n_prompt']}: prompt processing{depth}, mean of repetitions",
        )
        _measured(
            m,
            "ttft_ms",
            prefill_ms,
            "ms",
            samples=samples_ms,
            description="= prefill_ms (llama-bench has no separate first-token timer)",
        )
        _measured(
            m,
            "prefill_tokens_per_s",
            float(r["avg_ts"]),
            "tokens/s",
            "higher",
            samples=r.get("samples_ts", ()),
        )
    if tg:
        r = tg[0]
        n = int(r["n_gen"])
        step_ms = float(r["avg_ns"]) * MS_PER_NS / n
        depth = f" after {r['n_depth']} cached tokens" if r.get("n_depth") else ""
        _measured(
            m,
            "decode_tokens_per_s",
            float(r["avg_ts"]),
            "tokens/s",
            "higher",
            samples=r.get("samples_ts", ()),
            description=f"tg{n}: generation{depth}, mean of repetitions",
        )
        _measured(
            m,
            "decode_step_ms",
            step_ms,
            "ms",
            samples=[s * MS_PER_NS / n for s in r.get("samples_ns", ())],
        )
        if "stddev_ts" in r:
            _measured(m, "decode_tokens_per_s_std", float(r["stddev_ts"]), "tokens/s", "none")
    if prefill_ms is not None and step_ms is not None:
        n = int(tg[0]["n_gen"])
        _measured(
            m,
            "e2e_ms",
            prefill_ms + n * step_ms,
            "ms",
            description=f"pp{pp[0]['n_prompt']} + tg{n}, from the two tests",
        )
    first = (pp or tg)[0]
    prov = {k: str(first[k]) for k in _LLAMA_PROVENANCE if k in first}
    prov["tests"] = ",".join(
        f"pp{r['n_prompt']}"
        if r["n_gen"] == 0
        else f"tg{r['n_gen']}"
        if r["n_prompt"] == 0
        else f"pp{r['n_prompt']}+tg{r['n_gen']}"
        for r in rows
    )
    ran = {"prompt_tokens": int(pp[0]["n_prompt"])} if pp else {}
    if tg:
        ran["new_tokens"] = int(tg[0]["n_gen"])
    return Parsed(m, prov, ran)


# --- ExecuTorch PyTorchObserver ------------------------------------------------------------------

_ET_LINE = re.compile(r"PyTorchObserver (\{.*\})")
_ET_REQUIRED = (
    "prompt_tokens",
    "generated_tokens",
    "inference_start_ms",
    "prompt_eval_end_ms",
    "first_token_ms",
    "inference_end_ms",
)


def parse_executorch(text: str) -> Parsed:
    lines = _ET_LINE.findall(text)
    if not lines:
        raise ParseError(
            f"executorch: expected a line 'PyTorchObserver {{json}}'; output was: {_tail(text)!r}"
        )
    try:
        s = json.loads(lines[-1])
    except json.JSONDecodeError as e:
        raise ParseError(f"executorch: PyTorchObserver payload is not JSON: {e.msg}") from e
    missing = [k for k in _ET_REQUIRED if k not in s]
    if missing:
        raise ParseError(f"executorch: PyTorchObserver JSON lacks field(s) {missing}")
    units_per_s = float(s.get("SCALING_FACTOR_UNITS_PER_SECOND", MS_PER_S))
    to_ms = MS_PER_S / units_per_s
    start, prompt_end = s["inference_start_ms"], s["prompt_eval_end_ms"]
    first, end = s["first_token_ms"], s["inference_end_ms"]
    if not start <= prompt_end <= end or not start <= first <= end:
        raise ParseError(
            f"executorch: timestamps out of order: inference_start_ms={start}, "
            f"prompt_eval_end_ms={prompt_end}, first_token_ms={first}, inference_end_ms={end}"
        )
    gen = int(s["generated_tokens"])
    m = Metrics()
    _measured(
        m,
        "ttft_ms",
        (first - start) * to_ms,
        "ms",
        description="first_token_ms - inference_start_ms",
    )
    _measured(
        m,
        "prefill_ms",
        (prompt_end - start) * to_ms,
        "ms",
        description="prompt_eval_end_ms - inference_start_ms (includes tokenization)",
    )
    decode_ms = (end - prompt_end) * to_ms
    if gen > 0 and decode_ms > 0:
        _measured(
            m,
            "decode_tokens_per_s",
            gen / (decode_ms / MS_PER_S),
            "tokens/s",
            "higher",
            description="generated_tokens / (inference_end_ms - prompt_eval_end_ms), as stats.h",
        )
        _measured(m, "decode_step_ms", decode_ms / gen, "ms")
    _measured(
        m,
        "e2e_ms",
        (end - start) * to_ms,
        "ms",
        description="inference_end_ms - inference_start_ms",
    )
    if "model_load_start_ms" in s and "model_load_end_ms" in s:
        _measured(
            m, "model_load_ms", (s["model_load_end_ms"] - s["model_load_start_ms"]) * to_ms, "ms"
        )
    if "aggregate_sampling_time_ms" in s:
        _measured(m, "sampling_ms", s["aggregate_sampling_time_ms"] * to_ms, "ms")
    m.add("prompt_tokens", int(s["prompt_tokens"]), "tokens", "none", "measured")
    m.add("generated_tokens", gen, "tokens", "none", "measured")
    return Parsed(m, {}, {"prompt_tokens": int(s["prompt_tokens"]), "new_tokens": gen})


# --- harmony-ref generate --json ------------------------------------------------------------------

_GENERATE_REQUIRED = (
    "prompt_tokens",
    "new_tokens",
    "ttft_ms",
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "decode_steps",
)


def parse_harmony_ref_generate(text: str) -> Parsed:
    fmt = "harmony-ref-generate"
    start = text.find("{")
    if start < 0:
        raise ParseError(
            f"{fmt}: expected the JSON object of `harmony-ref generate --json`; "
            f"output was: {_tail(text)!r}"
        )
    try:
        g, _end = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as e:
        raise ParseError(f"{fmt}: output is not valid JSON at char {start + e.pos}: {e.msg}") from e
    missing = [k for k in _GENERATE_REQUIRED if not isinstance(g, dict) or k not in g]
    if missing:
        raise ParseError(f"{fmt}: the JSON lacks field(s) {missing}")
    prompt, steps = int(g["prompt_tokens"]), int(g["decode_steps"])
    ttft = _num(str(g["ttft_ms"]), "ttft_ms", fmt)
    pre_tps = _num(str(g["prefill_tokens_per_s"]), "prefill_tokens_per_s", fmt)
    m = Metrics()
    _measured(m, "ttft_ms", ttft, "ms", description="prefill + first token, one generation")
    _measured(m, "prefill_tokens_per_s", pre_tps, "tokens/s", "higher")
    _measured(
        m,
        "prefill_ms",
        prompt / pre_tps * MS_PER_S,
        "ms",
        description="prompt_tokens / prefill_tokens_per_s",
    )
    if steps > 0:
        dec_tps = _num(str(g["decode_tokens_per_s"]), "decode_tokens_per_s", fmt)
        _measured(m, "decode_tokens_per_s", dec_tps, "tokens/s", "higher")
        _measured(m, "decode_step_ms", MS_PER_S / dec_tps, "ms")
        _measured(
            m,
            "e2e_ms",
            ttft + steps / dec_tps * MS_PER_S,
            "ms",
            description="ttft_ms + decode_steps / decode_tokens_per_s",
        )
    if "peak_rss_mb" in g:
        _measured(
            m,
            "peak_memory_mb",
            _num(str(g["peak_rss_mb"]), "peak_rss_mb", fmt) * MIB / MB,
            "MB",
            description="the generating process's peak RSS (ru_maxrss)",
        )
    m.add("prompt_tokens", prompt, "tokens", "none", "measured")
    m.add("generated_tokens", int(g["new_tokens"]), "tokens", "none", "measured")
    prov = {k: str(g[k]) for k in ("model", "policy", "threads", "sampling") if k in g}
    return Parsed(m, prov, {"prompt_tokens": prompt, "new_tokens": int(g["new_tokens"])})


PARSERS = {
    "mslite": parse_mslite,
    "tflite": parse_tflite,
    "llama-bench": parse_llama_bench,
    "llama-perplexity": parse_llama_perplexity,
    "executorch": parse_executorch,
    "harmony-ref-generate": parse_harmony_ref_generate,
}


def parse(fmt: str, text: str) -> Parsed:
    if fmt not in PARSERS:
        raise ValueError(f"unknown output format {fmt!r}; known: {list(PARSERS)}")
    return PARSERS[fmt](text)
