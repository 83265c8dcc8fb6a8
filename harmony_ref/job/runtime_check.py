"""Catch fast-but-wrong runtimes: run the runtime under test on harmony-ref's corpus, compare what
it says about the model with harmony-ref's own FP32 reference, and flag it `inaccurate` when it is
no longer computing the model, so that its speed is never taken for a result.

    check = RuntimeCheck(template, fmt="llama-perplexity", model="smollm2-135m", context=512)
    ref = reference_for(check, progress)       # FP32 PPL and the bound, cached
    result = run_check(check, ref)             # verdict, reasons, metrics (flagged when wrong)
    record = result_record(check, result, ref) # a run record the gate reads

**llama-perplexity.** The template (`{model}`, `{corpus}`, `{context}`, `{chunks}`) runs the
runtime on the held-out corpus (or `corpus`, --corpus FILE: the user's own UTF-8 text, e.g.
wikitext or their app's prompts; missing, not UTF-8, empty or shorter than one chunk is bad input) that `write_corpus` puts in a file (the exact bytes harmony-ref
scores; on a phone the template copies it over, e.g. `hdc file send {corpus} ...`). Its perplexity
is parsed and divided by the FP32 reference perplexity of the same model, text, context and
scoring rule (`eval/lm.py`, llama-perplexity's rule: floor(n / context) chunks, BOS first, the
second half of each chunk scored). The runtime's own report of chunks and n_ctx must match the
reference's, else the two did not score the same thing (an error, not a verdict).

The bound is derived, not guessed. `expect` names the arithmetic a correct runtime is allowed
(default `int8`: the stored weights run with 8-bit activations, as llama.cpp's Q8 dot products;
`as-stored`: the GGUF file's own tensors exactly as stored, on our kernels, i.e. the file
harmony-ref exported and scored (`accuracy --policy as-stored`); or any policy, e.g. `int4-g32`
for a runtime that re-quantizes the weights). harmony-ref measures
that policy's own PPL ratio r_expect on the SAME model, chunks and context with its kernel path
(`evaluate_lm`), and allows

    ratio <= bound = 1 + max(MARGIN_FACTOR * (r_expect - 1), MIN_EXCESS),  ratio >= 1 / bound

MARGIN_FACTOR = 2: another runtime rounds differently from our kernels (Q8_0 vs Q8_1 activation
blocks, fp16 accumulation, its own KV precision), errors of the same order as r_expect - 1, so
twice our measured cost. MIN_EXCESS = 1%: two correct FP32 implementations already differ by
0.1% on this corpus (12.545 vs llama.cpp's 12.558 on SmolLM2, README), and a format that costs
nothing measurable would otherwise get a zero-width bound; ten times that disagreement. On
SmolLM2-135M (context 512, 12 chunks) int8 measures r = 1.0056 (README), so the bound is 1.0112:
a runtime several times too high (llama.cpp's AMX Q4_0/Q4_1 bug) is far outside it, and so is
one that scores a different text (ratio below 1 / bound).

**MindSpore Lite benchmark** compares the model's outputs with calibration outputs of the source
model itself (`--benchmarkDataFile`); harmony-ref judges what it prints (benchmark_base.h):
- a tensor whose printed values are all 0 is `inaccurate` (an unsupported NPU operator's zeros);
- mean bias >= 100%: `CompareData` scores |out - ref| / |ref| per element, so an all-zero output
  scores exactly 100%; anything at or above it is no closer to the model than zeros. (The tool's
  cosine then reads 1: `GetMeanError` returns 1 when the output's sum of squares is < FLT_EPSILON,
  so cosine alone cannot catch zeros.)
- cosine < MSLITE_MIN_COSINE = 1 - 2 x (1 - 0.8900) = 0.78: the lowest cosine to FP32 any shipped
  format gives on real weights is 0.8900 (MiniLM, int4-g128, minimum over 352 sentences, README),
  and the same factor-two margin as above; below it the output is not the model;
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

import hashlib
import json
import string
from dataclasses import dataclass, field
from pathlib import Path

from harmony_ref.metrics import Metrics

CHECK_FORMATS = ("llama-perplexity", "mslite")
PLACEHOLDERS = {"llama-perplexity": ("model", "corpus", "context", "chunks"), "mslite": ("model",)}
DEFAULT_EXPECT = "int8"
DEFAULT_CONTEXT = 512
MARGIN_FACTOR = 2.0
MIN_EXCESS = 0.01
LOWEST_MEASURED_COSINE = 0.8900  # MiniLM, int4-g128, min over the paraphrase set (README)
MSLITE_MIN_COSINE = 1.0 - MARGIN_FACTOR * (1.0 - LOWEST_MEASURED_COSINE)
ZERO_OUTPUT_BIAS_PCT = 100.0
CORPUS_PART = "heldout"
RULE_VERSION = 1  # bump when the reference or the bound rule changes (invalidates the cache)
INACCURATE = "inaccurate"


@dataclass(frozen=True)
class RuntimeCheck:
    template: str
    fmt: str = "llama-perplexity"
    model: str = "smollm2-135m"
    context: int = DEFAULT_CONTEXT
    chunks: int | None = None  # None: every whole chunk of the corpus, as llama-perplexity
    expect: str = DEFAULT_EXPECT
    timeout_s: float = 3600.0
    label: str = ""
    device: str = "host"
    session: object = None  # a SessionSpec (lab/session_spec.py), or None: run here
    corpus: str | None = None  # --corpus FILE: the user's own UTF-8 text (None: the shipped one)
    parser_flag: str = "--parser"  # the flag `fmt` came by, as given (its old spelling: --format)

    def __post_init__(self):
        if self.fmt not in CHECK_FORMATS:
            raise ValueError(
                f"{self.parser_flag} {self.fmt!r}: check-runtime reads {list(CHECK_FORMATS)}"
            )
        if self.corpus is not None:
            if self.fmt != "llama-perplexity":
                raise ValueError(
                    f"--corpus {self.corpus}: applies to {self.parser_flag} llama-perplexity "
                    f"only (got {self.parser_flag} {self.fmt})"
                )
            corpus_text(self)  # missing, not UTF-8, empty: bad input before any work
        check_template(
            self.template, self.fmt, SESSION_PLACEHOLDERS if self.session is not None else ()
        )
        from harmony_ref.eval.lm import check_scoring

        check_scoring(self.context, self.chunks)
        if not self.timeout_s > 0:
            raise ValueError(f"--timeout {self.timeout_s}: must be > 0")


SESSION_PLACEHOLDERS = ("work_dir", "python")


def check_template(template: str, fmt: str, extra: tuple[str, ...] = ()) -> list[str]:
    """The placeholders of `template`; ValueError on a malformed one or one `fmt` cannot fill
    (`extra`: more a session fills)."""
    if not template.strip():
        raise ValueError("--command: the template is empty")
    try:
        names = [f for _, f, spec, conv in string.Formatter().parse(template) if f is not None]
    except ValueError as e:
        raise ValueError(
            f"--command {template!r}: malformed template ({e}); literal braces are "
            "written {{ and }}"
        ) from e
    allowed = PLACEHOLDERS[fmt] + tuple(extra)
    bad = [n for n in names if n not in allowed]
    if bad:
        raise ValueError(
            f"--command {template!r}: unknown placeholder {{{bad[0]}}}; with --parser "
            f"{fmt} the template may use {', '.join('{' + a + '}' for a in allowed)}"
        )
    if fmt == "llama-perplexity" and "corpus" not in names:
        raise ValueError(
            f"--command {template!r}: has no {{corpus}}: the runtime must score the "
            "corpus file harmony-ref writes, or the reference is for another text"
        )
    return names


# --- the reference and the bound ---------------------------------------------------------------


@dataclass(frozen=True)
class Bound:
    expect: str
    expected_ratio: float  # our own measured PPL ratio for `expect` on this model and text
    high: float
    low: float

    @classmethod
    def from_expected(cls, expect: str, expected_ratio: float) -> Bound:
        high = 1.0 + max(MARGIN_FACTOR * (expected_ratio - 1.0), MIN_EXCESS)
        return cls(expect, expected_ratio, high, 1.0 / high)

    def how(self) -> str:
        return (
            f"bound = 1 + max({MARGIN_FACTOR:g} x ({self.expected_ratio:.4f} - 1), "
            f"{MIN_EXCESS:g}) = {self.high:.4f} (ratio {self.expected_ratio:.4f} measured "
            f"for {self.expect} by harmony-ref on the same model, text and context); "
            f"lower bound 1 / {self.high:.4f} = {self.low:.4f}"
        )


@dataclass(frozen=True)
class Reference:
    ppl: float
    bound: Bound
    chunks: int
    context: int
    scored_tokens: int
    tokens: int
    model_sha256: str
    corpus_sha256: str
    cached: bool = False

    def to_dict(self) -> dict:
        return {
            "ppl": self.ppl,
            "expect": self.bound.expect,
            "expected_ratio": self.bound.expected_ratio,
            "bound_high": self.bound.high,
            "bound_low": self.bound.low,
            "chunks": self.chunks,
            "context": self.context,
            "scored_tokens": self.scored_tokens,
            "tokens": self.tokens,
            "model_sha256": self.model_sha256,
            "corpus_sha256": self.corpus_sha256,
            "rule_version": RULE_VERSION,
        }


def corpus_text(check: RuntimeCheck | None = None) -> str:
    """The text the reference scores: `check.corpus` (--corpus FILE) or the shipped held-out part."""
    if check is not None and check.corpus is not None:
        from harmony_ref.eval.lm_accuracy import Corpus

        return Corpus.from_file(check.corpus).text
    from harmony_ref.eval.lm import load_corpus

    return load_corpus(CORPUS_PART)


def write_corpus(directory: str | Path, check: RuntimeCheck | None = None) -> Path:
    """The corpus file the template's {corpus} names: the exact bytes the reference scores."""
    from harmony_ref._io import write_text_atomic

    stem = CORPUS_PART if check is None or check.corpus is None else Path(check.corpus).stem
    path = Path(directory) / f"harmony-ref-{stem}.txt"
    write_text_atomic(path, corpus_text(check))
    return path


def reference_for(check: RuntimeCheck, progress=None, use_cache: bool = True) -> Reference:
    """harmony-ref's FP32 perplexity and the derived bound for `check`'s model, corpus, context
    and chunks (eval/lm.py's rule). Cached under $HARMONY_REF_CACHE/runtime-check by the SHA-256
    of the model (eval/lm_accuracy.model_sha256) and the corpus, the context, chunks, BOS rule,
    `expect` and RULE_VERSION; the FP32 reference's log-probs come from and go to the shared
    reference cache (eval/lm_cache.py), so `accuracy` and `check-runtime` compute them once.
    HARMONY_REF_NO_LM_CACHE=1 or `use_cache=False` turn both off. `progress(done, total)` is
    called after each chunk."""
    from harmony_ref._io import write_text_atomic
    from harmony_ref.checkpoint.assets import cache_dir
    from harmony_ref.eval.lm import chunk_tokens, evaluate_lm
    from harmony_ref.eval.lm_accuracy import Corpus, check_chunks, model_sha256
    from harmony_ref.eval.lm_cache import ReferenceCache, cache_root
    from harmony_ref.quant.policy import AS_STORED, load_policy
    from harmony_ref.runtime.loader import load_decoder, resolve_model_path, stored_policy

    as_stored = check.expect == AS_STORED
    if not as_stored:
        load_policy(check.expect)  # a bad --expect is bad input before any work
    use_cache = use_cache and cache_root() is not None
    path = resolve_model_path(check.model)
    text = corpus_text(check)
    model_sha = model_sha256(check.model, path)
    corpus_sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    key_src = json.dumps(
        [model_sha, corpus_sha, check.context, check.chunks, check.expect, RULE_VERSION]
    )
    key = hashlib.sha256(key_src.encode()).hexdigest()[:32]
    cache = cache_dir() / "runtime-check" / f"{key}.json"
    if use_cache and cache.is_file():
        try:
            d = json.loads(cache.read_text())
            return Reference(
                d["ppl"],
                Bound.from_expected(d["expect"], d["expected_ratio"]),
                d["chunks"],
                d["context"],
                d["scored_tokens"],
                d["tokens"],
                d["model_sha256"],
                d["corpus_sha256"],
                cached=True,
            )
        except (ValueError, KeyError, TypeError):
            cache.unlink(missing_ok=True)  # a corrupt cache entry is recomputed
    weights, tok = load_decoder(check.model, keep_stored=as_stored)
    expect = stored_policy(weights, check.model) if as_stored else check.expect
    if check.context > weights.config.max_positions:
        raise ValueError(
            f"--context {check.context}: exceeds {check.model}'s "
            f"{weights.config.max_positions} positions"
        )
    corpus = Corpus(check.corpus or CORPUS_PART, text, corpus_sha)
    ids = corpus.tokens(tok, None if check.chunks is None else check.chunks * check.context)
    n_tokens = len(ids)
    if n_tokens < check.context:
        where = f"--corpus {check.corpus}" if check.corpus else "the corpus"
        raise ValueError(
            f"{where}: {n_tokens} tokens, fewer than one chunk of --context {check.context}"
        )
    n_chunks = len(chunk_tokens(ids, check.context))
    check_chunks(check.chunks, n_chunks, check.corpus or CORPUS_PART, check.context)
    if check.chunks is not None:
        n_chunks = check.chunks
        ids = ids[: n_chunks * check.context]
    shared = (
        ReferenceCache.for_run(model_sha, corpus_sha, check.context, tok.add_bos)
        if use_cache
        else None
    )
    r = evaluate_lm(
        weights,
        ids,
        check.context,
        variants=[(expect, "fp16")],
        add_bos=tok.add_bos,
        progress=progress,
        reference_cache=shared,
    )
    res = r["results"]
    ref = res["reference"]
    (variant,) = [v for k, v in res.items() if k != "reference"]
    out = Reference(
        ref["ppl"],
        Bound.from_expected(check.expect, variant["ppl_ratio"]),
        r["chunks"],
        check.context,
        ref["scored_tokens"],
        n_tokens,
        model_sha,
        corpus_sha,
    )
    if use_cache:
        write_text_atomic(cache, json.dumps(out.to_dict(), indent=1) + "\n")
    return out


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
        result = _judge_perplexity(check, ref, done)
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


def _judge_perplexity(check: RuntimeCheck, ref: Reference, done) -> CheckResult:
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
    accurate = not reasons
    m.add(
        "runtime_accurate",
        1.0 if accurate else 0.0,
        "bool",
        "higher",
        "exact",
        description="; ".join(reasons) or f"ratio {ratio:.4f} within {b.low:.4f} .. {b.high:.4f}",
    )
    return CheckResult(accurate, reasons, m, prov)


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
    accurate = not reasons
    m.add(
        "runtime_accurate",
        1.0 if accurate else 0.0,
        "bool",
        "higher",
        "exact",
        description="; ".join(reasons) or "outputs match the calibration data",
    )
    return CheckResult(accurate, reasons, m, {})


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
