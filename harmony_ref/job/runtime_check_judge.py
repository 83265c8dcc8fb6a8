"""Running the runtime under test once and judging what it printed against harmony-ref's reference
(job/runtime_check.py: the check, the FP32 reference and the bound): the verdict and its reasons,
every metric flagged `inaccurate` when the runtime is no longer computing the model, the run
record the gate reads and the row of the speed-and-accuracy table.

    result = run_check(check, ref, workdir)     # CheckResult: verdict, reasons, metrics
    record = result_record(check, result, ref)  # a run record
    row = table_row(label, record.metrics)      # speed shown only beside an accurate verdict

**MindSpore Lite benchmark** compares the model's outputs with calibration outputs of the source
model itself (`--benchmarkDataFile`); harmony-ref judges what it prints (benchmark_base.h):
- a tensor whose printed values are all 0 is `inaccurate` (an unsupported NPU operator's zeros);
- mean bias >= 100%: `CompareData` scores |out - ref| / |ref| per element, so an all-zero output
  scores exactly 100%; anything at or above it is no closer to the model than zeros. (The tool's
  cosine then reads 1: `GetMeanError` returns 1 when the output's sum of squares is < FLT_EPSILON,
  so cosine alone cannot catch zeros.)
- cosine < MSLITE_MIN_COSINE = 1 - 2 x (1 - 0.8900) = 0.78: the lowest cosine to FP32 any shipped
  format gives on real weights is 0.8900 (MiniLM, int4-g128, minimum over 352 sentences, README),
  and the same factor-two margin as the perplexity bound (MARGIN_FACTOR, job/runtime_check.py);
  below it the output is not the model;
- the tool's own failing comparison line (`... is too big`, `... too small`, NaN/Inf) likewise.

An inaccurate run's metrics all carry the flag `inaccurate` and `runtime_accurate` is 0; the gate
refuses every flagged metric as a result (track/gate.py).

**Through a device session** (`session`, lab/session.py): the corpus is pushed to the device
(skipped when it already holds the same SHA-256) and `{corpus}` is its path there; `{work_dir}`
and `{python}` are known; the run waits for the phone to cool first and is sampled while it
runs; the record keeps the telemetry and the session's metrics, and a run marked throttled is
not a result the gate takes (one measured repeat, valid only when unthrottled).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harmony_ref.job.runtime_check import (
    CORPUS_PART,
    MARGIN_FACTOR,
    Reference,
    RuntimeCheck,
    write_corpus,
)
from harmony_ref.metrics import Metrics

LOWEST_MEASURED_COSINE = 0.8900  # MiniLM, int4-g128, min over the paraphrase set (README)
MSLITE_MIN_COSINE = 1.0 - MARGIN_FACTOR * (1.0 - LOWEST_MEASURED_COSINE)
ZERO_OUTPUT_BIAS_PCT = 100.0
INACCURATE = "inaccurate"


# --- running the runtime and judging it --------------------------------------------------------


@dataclass
class CheckResult:
    accurate: bool
    reasons: list[str]
    metrics: Metrics
    provenance: dict = field(default_factory=dict)
    command: str = ""
    session: dict | None = None  # the device session's record block, when run through one

    @property
    def verdict(self) -> str:
        return "accurate" if self.accurate else INACCURATE


def _values(check: RuntimeCheck, corpus: Path | None, ref: Reference | None) -> dict:
    v = {"model": check.model}
    if check.fmt == "llama-perplexity":
        from harmony_ref.runtime.loader import resolve_model_path

        v.update(
            model=str(resolve_model_path(check.model)),
            corpus=str(corpus),
            context=check.context,
            chunks=ref.chunks if ref else -1,
        )
    return v


def run_check(
    check: RuntimeCheck, ref: Reference | None, workdir: str | Path, progress=None
) -> CheckResult:
    """Run the template once and judge its output (BackendError: it did not run or its output is
    not the format; ValueError: it scored something other than the reference; DeviceGone: the
    session's device left)."""
    from harmony_ref.backends.command import (
        CommandOutput,
        command_provenance,
        fill_template,
        run_command,
    )

    corpus = write_corpus(workdir, check) if check.fmt == "llama-perplexity" else None
    values = _values(check, corpus, ref)
    finish = None
    if check.session is None:
        cmd = fill_template(check.template, values)
        done = run_command(cmd, check.timeout_s)
    else:
        from harmony_ref.lab.session import DeviceSession, session_values

        ds = DeviceSession(check.session, progress=progress)
        ds.prepare(((corpus, corpus.name, False),) if corpus is not None else ())
        values.update(session_values(check.session))
        if corpus is not None:
            values["corpus"] = ds.remote(corpus.name)
        cmd = fill_template(check.template, values)
        shell, finish = ds.run_single(cmd, check.timeout_s)
        done = CommandOutput(cmd, shell.returncode, shell.out, shell.err, shell.wall_s)
    if check.fmt == "llama-perplexity":
        result = _judge_llama_perplexity(check, ref, done)
    else:
        result = _judge_mslite(done)
    result.command = cmd
    result.provenance.update(
        command=cmd,
        format=check.fmt,
        command_wall_s=f"{done.wall_s:.3f}",
        exit_code=str(done.returncode),
    )
    result.provenance.update(command_provenance(done.text))
    if finish is not None:
        sr = finish(result.metrics)
        result.session = sr.to_record()
        for metric in sr.session_metrics().values():
            result.metrics.put(metric)
        result.provenance.update(transport=sr.transport, serial=sr.serial, **sr.identity)
    if not result.accurate:
        result.metrics = mark_inaccurate(result.metrics)
    return result


def mark_inaccurate(metrics: Metrics) -> Metrics:
    """Every metric of an inaccurate run flagged, speed included: none of them is a result."""
    return Metrics({n: m.flagged(INACCURATE) for n, m in metrics.items.items()})


def _judge_llama_perplexity(check: RuntimeCheck, ref: Reference, done) -> CheckResult:
    from harmony_ref.lab.errors import BackendError
    from harmony_ref.lab.parsers import ParseError, parse_llama_perplexity

    if done.returncode != 0:
        raise BackendError(
            f"command {done.command!r} exited with code {done.returncode}; no "
            f"result recorded. Last stderr:\n{done.stderr_tail()}"
        )
    try:
        parsed = parse_llama_perplexity(done.text)
    except ParseError as e:
        raise BackendError(f"command {done.command!r}: {e}") from e
    prov = dict(parsed.provenance)
    for key, want in (("n_ctx", ref.context), ("n_chunks", ref.chunks)):
        if key in prov and int(prov[key]) != want:
            raise ValueError(
                f"the runtime scored {key}={prov[key]} but the reference has "
                f"{key}={want}: not the same text and context (pass {{context}} and "
                f"{{chunks}} to the runtime, e.g. -c {{context}} --chunks {{chunks}})"
            )
    m = parsed.metrics
    ppl = m.value("perplexity")
    if not ppl > 0:
        raise BackendError(f"command {done.command!r}: perplexity {ppl} is not > 0")
    return judge_perplexity(ppl, ref, m, prov)


def judge_perplexity(ppl: float, ref: Reference, m: Metrics, prov: dict) -> CheckResult:
    """The verdict on a runtime's perplexity `ppl` (> 0) over the reference's chunks: its ratio
    to the FP32 reference within the bound, the reference, bound and our own `expect` numbers
    added to `m` (the runtime's metrics) beside it."""
    ratio = ppl / ref.ppl
    b = ref.bound
    m.add(
        "reference_perplexity",
        ref.ppl,
        "1",
        "none",
        "exact",
        description=f"harmony-ref FP32 (NumPy) over {ref.chunks} chunks of {ref.context}",
    )
    m.add(
        "ppl_ratio_to_reference",
        ratio,
        "1",
        "lower",
        "exact",
        description=f"runtime PPL / FP32 reference PPL; allowed {b.low:.4f} .. {b.high:.4f}",
    )
    m.add("ppl_ratio_bound", b.high, "1", "none", "exact", description=b.how())
    ours = ref.ppl * b.expected_ratio
    m.add(
        "expected_perplexity",
        ours,
        "1",
        "none",
        "exact",
        description=f"harmony-ref's own perplexity with --expect {b.expect} (same text, context "
        "and scoring rule)",
    )
    m.add(
        "ppl_ratio_to_expected",
        ppl / ours,
        "1",
        "none",
        "exact",
        description=f"runtime PPL / harmony-ref's PPL with --expect {b.expect}",
    )
    reasons = []
    if ratio > b.high:
        reasons.append(
            f"perplexity {ppl:.4f} is {ratio:.3f}x the FP32 reference {ref.ppl:.4f}, "
            f"beyond the bound {b.high:.4f} ({b.how()})"
        )
    elif ratio < b.low:
        reasons.append(
            f"perplexity {ppl:.4f} is {ratio:.3f}x the FP32 reference {ref.ppl:.4f}, "
            f"below 1 / bound = {b.low:.4f}: it did not score the same model and text"
        )
    return _verdict(reasons, m, prov, f"ratio {ratio:.4f} within {b.low:.4f} .. {b.high:.4f}")


def _judge_mslite(done) -> CheckResult:
    from harmony_ref.lab.errors import BackendError
    from harmony_ref.lab.parsers import ParseError, mslite_accuracy, parse_mslite

    acc = mslite_accuracy(done.text)
    if (
        acc.mean_bias_pct is None
        and acc.cosine is None
        and acc.failure is None
        and not acc.printed_values
    ):
        if done.returncode != 0:
            raise BackendError(
                f"command {done.command!r} exited with code {done.returncode}; no "
                f"result recorded. Last stderr:\n{done.stderr_tail()}"
            )
        raise BackendError(
            f"command {done.command!r}: mslite output has no accuracy lines "
            "('Mean bias of all nodes/tensors' / 'Cosine distance of all "
            "nodes/tensors'): run benchmark with --benchmarkDataFile=<calibration "
            "outputs> (and --cosineDistanceThreshold=-1 for the cosine)"
        )
    reasons = []
    if acc.failure:
        reasons.append(f"the benchmark's own comparison failed: {acc.failure!r}")
    for name, vals in acc.printed_values.items():
        if vals and all(v == 0 for v in vals):
            reasons.append(f"output tensor {name}: all {len(vals)} printed values are 0")
    if acc.mean_bias_pct is not None and acc.mean_bias_pct >= ZERO_OUTPUT_BIAS_PCT:
        note = (
            " (its cosine reads 1 only because the tool scores an all-zero output as 1)"
            if acc.cosine == 1.0
            else ""
        )
        reasons.append(
            f"mean bias {acc.mean_bias_pct:g}% >= {ZERO_OUTPUT_BIAS_PCT:g}%: no closer "
            f"to the calibration outputs than all zeros{note}"
        )
    if acc.cosine is not None and acc.cosine < MSLITE_MIN_COSINE:
        reasons.append(
            f"cosine {acc.cosine:.4f} < {MSLITE_MIN_COSINE:.2f}: not the model (below "
            f"twice the loss of our lossiest format, cosine {LOWEST_MEASURED_COSINE})"
        )
    m = Metrics()
    if done.returncode == 0 and acc.failure is None:
        try:
            m.update(parse_mslite(done.text).metrics)
        except ParseError as e:
            if not reasons:
                raise BackendError(f"command {done.command!r}: {e}") from e
    elif not reasons:
        raise BackendError(
            f"command {done.command!r} exited with code {done.returncode}; no "
            f"result recorded. Last stderr:\n{done.stderr_tail()}"
        )
    for name, unit, direction, v in (
        ("mslite_mean_bias_pct", "%", "lower", acc.mean_bias_pct),
        ("mslite_cosine_distance", "1", "higher", acc.cosine),
    ):
        if v is not None:
            m.add(name, v, unit, direction, "exact")
    return _verdict(reasons, m, {}, "outputs match the calibration data")


def _verdict(reasons: list[str], m: Metrics, provenance: dict, why_accurate: str) -> CheckResult:
    """The judged result: accurate when no reason says otherwise, `runtime_accurate` (1 or 0)
    added to `m` with the reasons, or `why_accurate`, as its description."""
    accurate = not reasons
    m.add(
        "runtime_accurate",
        1.0 if accurate else 0.0,
        "bool",
        "higher",
        "exact",
        description="; ".join(reasons) or why_accurate,
    )
    return CheckResult(accurate, reasons, m, provenance)


# --- the run record and the side-by-side table -------------------------------------------------


def result_record(check: RuntimeCheck, result: CheckResult, ref: Reference | None):
    from harmony_ref.track.record import Record, collect_provenance

    config = {
        "model": check.model,
        "policy": f"runtime-check:{check.expect}"
        if check.fmt == "llama-perplexity"
        else "runtime-check:mslite",
        "profile": check.device,
        "backend": "command",
        "scenario": {
            "prompt_tokens": check.context,
            "new_tokens": 0,
            "context_tokens": check.context,
            "batch": 1,
        },
        "backend_options": {
            "command": check.template,
            "format": check.fmt,
            "check": "runtime",
            "corpus": CORPUS_PART,
            "label": check.label,
        },
    }
    if check.program is not None:  # a .pte harmony-ref ran itself: no command, no parser
        config["backend"] = "executorch"
        opts = config["backend_options"]
        del opts["command"], opts["format"]
        opts["program"] = str(check.program)
    prov = collect_provenance()
    prov["runtime"] = dict(result.provenance)
    if ref is not None:
        prov["reference"] = ref.to_dict()
    detail = result.verdict + (": " + "; ".join(result.reasons) if result.reasons else "")
    part = {"status": "ok", "detail": detail}
    if result.session is not None:
        part["session"] = result.session
        from harmony_ref.lab.session_result import session_id

        config["backend_options"]["session_id"] = session_id(
            result.session, config["model"], config["policy"], config["scenario"]
        )
    return Record(config, result.metrics, prov, {"runtime_check": part})


SPEED_METRICS = ("decode_tokens_per_s", "prefill_tokens_per_s", "e2e_ms")


def table_row(label: str, metrics: Metrics) -> dict:
    """One row of the speed-and-accuracy table: a speed from an inaccurate run is not shown as a
    number, only as what it is."""
    accurate = metrics.value("runtime_accurate") == 1.0 if "runtime_accurate" in metrics else None
    speed_name = next((n for n in SPEED_METRICS if n in metrics), None)
    row = {
        "runtime": label,
        "speed": "-",
        "speed_metric": speed_name or "-",
        "perplexity": "-",
        "ppl_ratio": "-",
        "bound": "-",
        "vs_harmony_ref": "-",
        "cosine": "-",
        "verdict": {True: "accurate", False: INACCURATE, None: "unchecked"}[accurate],
    }
    if speed_name:
        s = metrics[speed_name]
        shown = f"{s.value:.4g} {s.unit}"
        row["speed"] = shown if accurate else f"not a result ({shown}, run {row['verdict']})"
    for col, name in (
        ("perplexity", "perplexity"),
        ("ppl_ratio", "ppl_ratio_to_reference"),
        ("bound", "ppl_ratio_bound"),
        ("vs_harmony_ref", "ppl_ratio_to_expected"),
        ("cosine", "mslite_cosine_distance"),
    ):
        if name in metrics:
            row[col] = f"{metrics.value(name):.4f}"
    return row


def row_from_record(record, source: str) -> dict:
    opts = record.config.get("backend_options", {})
    if opts.get("check") != "runtime":
        raise ValueError(
            f"{source}: not a check-runtime record (config.backend_options.check is "
            f"{opts.get('check')!r})"
        )
    label = opts.get("label") or record.provenance.get("runtime", {}).get("build") or source
    return table_row(label, record.metrics)
