"""The `executorch` backend: an ExecuTorch program of our decoder (`export --format pte`, lowered
to XNNPACK) run on this CPU as a device under test, timed the way ExecuTorch's llama runner
reports it (prompt evaluation, time to first token, generation rate, model load time), with the
metric names every other backend uses.

    m = ExecuTorchDevice(repeats=3).run(config)   # config.options["program"]: the .pte
    # run --backend executorch --model M.pte --prompt-tokens 64 --new-tokens 16

The program runs in a child process, backends/executorch_runner.py (ExecuTorch's Python runtime;
one model load, a warm-up generation, then `repeats` timed ones), which prints one
`PyTorchObserver {json}` line per generation, as the runner binary does
(extension/llm/runner/stats.h); each line goes through the `executorch` output parser
(lab/parsers.py), so this backend and a `measure --parser executorch` of the runner binary
name and compute the metrics alike. Each metric's value is the median of the repeats, all
samples kept; prefill_tokens_per_s (prompt tokens / prompt evaluation) is added, and
peak_memory_mb is the child's peak RSS (the program, its KV cache, the Python runtime and torch).
Not physics-checked: no profile of this CPU is assumed; `calibrate --backend executorch`
(calibrate/executorch.py) fits the executorch-xnnpack runtime on this host from these runs.
"""

from __future__ import annotations

import statistics
import subprocess
import sys

from harmony_ref.backends.base import Measurement
from harmony_ref.lab._parse import ParseError
from harmony_ref.lab.errors import BackendError
from harmony_ref.lab.parsers import parse_executorch
from harmony_ref.metrics import Metrics

RUNNER = "harmony_ref.backends.executorch_runner"


class ExecuTorchDevice:
    name = "executorch"

    def __init__(
        self, repeats: int = 3, warmup: int = 1, timeout_s: float = 1800.0, threads: int = 0
    ):
        self.repeats, self.warmup, self.timeout_s = repeats, warmup, timeout_s
        self.threads = threads  # ExecuTorch's threadpool size; 0: its default

    def run(self, config) -> Measurement:
        program = config.options.get("program")
        if not program:
            raise ValueError("backend 'executorch' needs the program: --model FILE.pte")
        s = config.scenario
        cmd = [sys.executable, "-m", RUNNER, "--model", str(program)]
        cmd += ["--prompt-tokens", str(s.prompt_tokens), "--new-tokens", str(s.new_tokens)]
        cmd += ["--warmup", str(self.warmup), "--repeats", str(self.repeats)]
        if self.threads:
            cmd += ["--threads", str(self.threads)]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired as e:
            raise BackendError(f"executorch: the runner ran past {self.timeout_s:g} s") from e
        if p.returncode != 0:
            last = (p.stderr.strip().splitlines() or ["no output"])[-1]
            raise BackendError(f"executorch: the runner exited {p.returncode}: {last}", p.stderr)
        metrics = runner_metrics(p.stdout)
        prov = {
            "program": str(program),
            "measured": f"{self.warmup} warm-up + {self.repeats} timed greedy generations of "
            f"{s.new_tokens} tokens after a {s.prompt_tokens}-token prompt from the held-out "
            f"corpus, ExecuTorch Python runtime in a child process ({RUNNER})",
            "threads": str(self.threads or "ExecuTorch's default"),
        }
        return Measurement(metrics, prov, physics="", config=config)


def runner_metrics(text: str) -> Metrics:
    """The runner's output (one PyTorchObserver line per timed generation, then peak_rss_mb)
    as Metrics: each parsed metric's median over the lines, with every sample."""
    lines = [ln for ln in text.splitlines() if ln.startswith("PyTorchObserver ")]
    rss = [ln.split()[1] for ln in text.splitlines() if ln.startswith("peak_rss_mb ")]
    if not lines or not rss:
        raise BackendError("executorch: the runner printed no PyTorchObserver or peak_rss_mb line")
    try:
        parsed = [parse_executorch(ln).metrics for ln in lines]
    except ParseError as e:
        raise BackendError(str(e)) from e
    out = Metrics()
    for first in parsed[0]:
        samples = [p[first.name].value for p in parsed]
        out.add(
            first.name,
            statistics.median(samples),
            first.unit,
            first.direction,
            "measured",
            samples,
            description=first.description,
        )
    prompt = out.value("prompt_tokens")
    rates = [prompt / (p["prefill_ms"].value / 1000.0) for p in parsed]
    out.add(
        "prefill_tokens_per_s",
        statistics.median(rates),
        "tokens/s",
        "higher",
        "measured",
        rates,
        description="prompt_tokens / (prompt_eval_end_ms - inference_start_ms): stats.h's "
        "prompt evaluation rate",
    )
    out.add(
        "peak_memory_mb",
        float(rss[-1]),
        "MB",
        "lower",
        "measured",
        description="peak RSS of the runner process: the program, its KV cache, the Python "
        "runtime and torch",
    )
    return out


def program_config(path: str, policy: str, default_policy: str, scenario) -> tuple[str, str, dict]:
    """(the checkpoint the program was exported from, its policy, the backend options) for
    `run --backend executorch --model FILE.pte`; ValueError in one line for a file that is not
    such a program, a --policy other than its own, or a scenario its static cache cannot hold."""
    from harmony_ref.backends.executorch_runner import check_scenario
    from harmony_ref.runtime.pte import read_manifest

    if not str(path).endswith(".pte"):
        raise ValueError(f"--model {path}: --backend executorch runs a .pte (export --format pte)")
    manifest = read_manifest(path)
    own = manifest["policy"]
    if policy not in (own, default_policy):
        raise ValueError(f"--policy {policy}: {path} was exported with --policy {own}")
    check_scenario(manifest, scenario.prompt_tokens, scenario.new_tokens, f"--model {path}")
    if scenario.context_tokens > manifest["max_context"]:
        raise ValueError(
            f"--context-tokens {scenario.context_tokens}: more than {path}'s static KV cache "
            f"({manifest['max_context']} positions)"
        )
    return manifest["model"], own, {"program": str(path)}
