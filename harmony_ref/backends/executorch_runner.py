"""A text-generation runner for our ExecuTorch programs (runtime/pte.py) that reports what
ExecuTorch's own llama runner reports: one line per generation,

    PyTorchObserver {"prompt_tokens": 64, "generated_tokens": 15, "model_load_start_ms": ...}

with the fields and meaning of executorch extension/llm/runner/stats.h (model load, inference
start, prompt evaluation end, first token, inference end, aggregate sampling time, in ms), so the
`executorch` output parser (lab/parsers.py) reads it as it reads the runner binary's, and
`measure --parser executorch --command "python -m harmony_ref.backends.executorch_runner ..."`
runs it like any device command. A last line `peak_rss_mb N` gives this process's peak RSS.

    python -m harmony_ref.backends.executorch_runner --model M.pte --prompt-tokens 64 \\
        --new-tokens 16 [--warmup 1] [--repeats 3] [--threads N]

What one generation is: the prompt (the first --prompt-tokens tokens of the shipped held-out
corpus, tokenized by the checkpoint the program was exported from) evaluated in one call, the
first token chosen greedily from its last logits, then --new-tokens - 1 decode calls, each
followed by a greedy choice (EOS ignored, so every repeat makes the same tokens). The prompt
runs the program's `forward` method, which computes the last position's logits only, as
ExecuTorch's runner does. `--threads N` sizes ExecuTorch's threadpool (XNNPACK's workers) before
the load, as the runner binary's --cpu_threads does; 0 keeps its default (cpuinfo's count).
`generated_tokens` counts those decode calls, so generated_tokens / (inference end - prompt
evaluation end) is the decode rate (as stats.h computes its generation rate). The model is loaded
once (`model_load_*`, the same in every line); `--warmup` untimed generations come first.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def _ms() -> float:
    return time.perf_counter() * 1000.0


def generate_stats(program, prompt, new_tokens: int, load: tuple[float, float]) -> dict:
    """One greedy generation of `program` (a PteProgram) timed as stats.h times it."""
    program.reset()
    sampling = 0.0
    start = _ms()
    logits = program.prefill(prompt)
    prompt_end = _ms()
    token = int(np.argmax(logits))
    first = _ms()
    sampling += first - prompt_end
    for _ in range(new_tokens - 1):
        logits = program.decode(token)
        t = _ms()
        token = int(np.argmax(logits))
        sampling += _ms() - t
    end = _ms()
    return observer_stats(
        len(prompt), new_tokens - 1, load, (start, prompt_end, first, end), sampling
    )


def observer_stats(prompt_tokens, generated_tokens, load, times, sampling_ms) -> dict:
    """stats.h's fields: `load` (model load start, end), `times` (inference start, prompt
    evaluation end, first token, inference end), all in ms."""
    start, prompt_end, first, end = times
    return {
        "prompt_tokens": prompt_tokens,
        "generated_tokens": generated_tokens,
        "model_load_start_ms": load[0],
        "model_load_end_ms": load[1],
        "inference_start_ms": start,
        "prompt_eval_end_ms": prompt_end,
        "first_token_ms": first,
        "inference_end_ms": end,
        "aggregate_sampling_time_ms": sampling_ms,
        "SCALING_FACTOR_UNITS_PER_SECOND": 1000,
    }


def check_scenario(manifest: dict, prompt_tokens: int, new_tokens: int, where: str) -> None:
    """A prompt and a generation the program's static cache holds; ValueError in one line."""
    if prompt_tokens < 1 or new_tokens < 2:
        raise ValueError(
            f"{where}: needs prompt tokens >= 1 and new tokens >= 2 (a decode step to time), "
            f"got {prompt_tokens} and {new_tokens}"
        )
    if prompt_tokens + new_tokens > manifest["max_context"]:
        raise ValueError(
            f"{where}: {prompt_tokens} prompt + {new_tokens} new tokens exceed the program's "
            f"{manifest['max_context']} positions (export --max-context)"
        )


def run(
    model: str, prompt_tokens: int, new_tokens: int, warmup: int, repeats: int, out, threads=0
) -> None:
    from harmony_ref.backends.host_llm import prompt_ids
    from harmony_ref.backends.host_timing import peak_rss_mb
    from harmony_ref.runtime.loader import load_tokenizer
    from harmony_ref.runtime.pte import PteProgram, read_manifest

    manifest = read_manifest(model)
    check_scenario(manifest, prompt_tokens, new_tokens, f"--model {model}")
    prompt = prompt_ids(load_tokenizer(manifest["model"]), prompt_tokens)
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    from executorch.runtime import Runtime

    if threads:
        _unsafe_reset_threadpool(threads)
    Runtime.get()  # the runtime library loaded before the clock starts: the runner's model load
    t0 = _ms()  # is the program and its method, as Module::load in the runner binary
    program = PteProgram(model, manifest, methods=("forward",))  # what generation reads
    load = (t0, _ms())
    for i in range(warmup + repeats):
        stats = generate_stats(program, prompt, new_tokens, load)
        if i >= warmup:
            print("PyTorchObserver " + json.dumps(stats), file=out, flush=True)
    print(f"peak_rss_mb {peak_rss_mb():.1f}", file=out, flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m harmony_ref.backends.executorch_runner")
    p.add_argument("--model", required=True, help="a .pte from export --format pte")
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="threadpool size (0: its default)")
    a = p.parse_args(argv)
    if a.warmup < 0 or a.repeats < 1 or a.threads < 0:
        print(
            f"--warmup {a.warmup} / --repeats {a.repeats} / --threads {a.threads}: "
            "need >= 0 / >= 1 / >= 0",
            file=sys.stderr,
        )
        return 2
    try:
        run(a.model, a.prompt_tokens, a.new_tokens, a.warmup, a.repeats, sys.stdout, a.threads)
    except ValueError as e:
        print(str(e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
