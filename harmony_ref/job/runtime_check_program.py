"""`check-runtime --model FILE.pte`: the same verdict as for a runtime run by a command template
(job/runtime_check.py), for an ExecuTorch program (runtime/pte.py) that harmony-ref runs itself.

    check, program = program_check("m.pte", context=512, chunks=4)   # checked before any work
    ref, runs = check_program(check, program, "results/runs")        # scored, judged, recorded

The program's logits are scored on harmony-ref's corpus by eval/lm.py's rule, in the same pass
and on the same chunks as the FP32 reference of the checkpoint its manifest names, and as our own
kernels under `expect` (default: the program's own policy, so the bound is derived from what our
kernels lose with the same policy, and `vs_harmony_ref` is the program beside our kernels). Its
perplexity is judged by the same ratio and bound as llama-perplexity's
(runtime_check_judge.judge_perplexity); being a full set of logits, it also gives the KL
divergence to FP32 and the top-1 agreement, under the names llama-perplexity's
--kl-divergence summary uses. Its speed: the program's prefill of each chunk, timed around
ExecuTorch's method call (one sample per chunk; the scoring, not a benchmark).

Needs the `executorch` extra; without it, the command refuses in one line (runtime/pte.py).
"""

from __future__ import annotations

import time
from pathlib import Path

from harmony_ref.job.runtime_check import Reference, RuntimeCheck, score_for
from harmony_ref.job.runtime_check_judge import (
    CheckResult,
    judge_perplexity,
    mark_inaccurate,
    result_record,
)
from harmony_ref.job.runtime_check_run import CheckRuns
from harmony_ref.metrics import Metrics

RUNTIME = "executorch-xnnpack"  # the runtime profile a .pte runs as (device/runtimes)


class TimedProgram:
    """A program (PteProgram's interface) whose prefill calls are timed, one sample per call."""

    def __init__(self, program):
        self.program, self.name = program, program.name
        self.samples_tps: list[float] = []

    def reset(self) -> None:
        self.program.reset()

    def prefill(self, tokens, all_logits: bool = False):
        t0 = time.perf_counter()
        out = self.program.prefill(tokens, all_logits=all_logits)
        self.samples_tps.append(len(tokens) / (time.perf_counter() - t0))
        return out


def program_check(
    path,
    context: int,
    chunks: int | None,
    expect: str | None = None,
    label: str = "",
    corpus: str | None = None,
) -> tuple[RuntimeCheck, object]:
    """(the check, the loaded program) for the .pte at `path`: ValueError in one line naming it
    when it is not a program of this ExecuTorch, its checkpoint is gone or changed, or `context`
    is longer than its static KV cache (runtime/pte.py program_for_scoring), before any work.
    `expect` (None): the program's own policy."""
    from harmony_ref.runtime.pte import program_for_scoring

    model, program = program_for_scoring(path, context)
    policy = program.manifest["policy"]
    check = RuntimeCheck(
        "",
        "llama-perplexity",
        model,
        context,
        chunks,
        expect or policy,
        label=label or f"executorch {policy}",
        corpus=corpus,
        program=str(path),
    )
    return check, program


def check_program(
    check: RuntimeCheck, program, out_dir, progress=None, use_cache: bool = True
) -> tuple[Reference, CheckRuns]:
    """Score `program` beside the reference, judge it, write its run record under `out_dir`."""
    from harmony_ref.track.record import write_record

    timed = TimedProgram(program)
    ref, scored = score_for(check, [timed], progress, use_cache)
    result = judge_program(check, ref, scored[timed.name], timed.samples_tps, program.manifest)
    path = write_record(result_record(check, result, ref), out_dir)
    return ref, CheckRuns(done=[(check, result, Path(path))])


def judge_program(
    check: RuntimeCheck, ref: Reference, summary: dict, samples_tps: list[float], manifest: dict
) -> CheckResult:
    """The verdict on a program's eval/lm.py `summary`, with its speed (`samples_tps`, prompt
    tokens per second of each chunk's prefill) beside it and its `manifest`'s facts (file
    SHA-256, policy, the versions that built it) in the provenance."""
    import numpy as np

    m = Metrics()
    m.add(
        "perplexity",
        summary["ppl"],
        "1",
        "lower",
        "exact",
        description=f"the program's logits over {ref.chunks} chunks of {ref.context} "
        "(eval/lm.py, llama-perplexity's rule)",
    )
    m.add(
        "kld_mean", summary["kld_mean"], "nats", "lower", "exact", description="KL(FP32 || program)"
    )
    p99 = next(k for k in summary if k.startswith("kld_p"))
    m.add(p99, summary[p99], "nats", "lower", "exact")
    m.add(
        "same_top_p_pct",
        summary["top1_agreement_pct"],
        "%",
        "higher",
        "exact",
        description="scored tokens whose argmax is the FP32 reference's",
    )
    m.add(
        "prefill_tokens_per_s",
        float(np.median(samples_tps)),
        "tokens/s",
        "higher",
        "measured",
        samples_tps,
        description=f"the program's prefill of each {ref.context}-token chunk while scored",
    )
    versions = manifest.get("versions", {})
    prov = {
        "program": str(check.program),
        "program_sha256": manifest.get("file_sha256", ""),
        "program_policy": manifest.get("policy", ""),
        "runtime": RUNTIME,
        **{f"{k}_version": str(v) for k, v in versions.items()},
    }
    result = judge_perplexity(summary["ppl"], ref, m, prov)
    if not result.accurate:
        result.metrics = mark_inaccurate(result.metrics)
    return result
