"""Catch fast-but-wrong runtimes: run the runtime under test on harmony-ref's corpus, compare what
it says about the model with harmony-ref's own FP32 reference, and flag it `inaccurate` when it is
no longer computing the model, so that its speed is never taken for a result.

    check = RuntimeCheck(template, fmt="llama-perplexity", model="smollm2-135m", context=512)
    ref = reference_for(check, progress)       # FP32 PPL and the bound, cached
    result = run_check(check, ref)             # verdict, reasons, metrics (runtime_check_judge)
    record = result_record(check, result, ref) # a run record the gate reads (runtime_check_judge)

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

Running the template once and judging what it printed (llama-perplexity's ratio against the
bound; MindSpore Lite's own comparison with the calibration outputs), the run record and the
table row are job/runtime_check_judge.py; several checks in turn, job/runtime_check_run.py.
"""

from __future__ import annotations

import hashlib
import json
import string
from dataclasses import dataclass
from pathlib import Path

CHECK_FORMATS = ("llama-perplexity", "mslite")
PLACEHOLDERS = {"llama-perplexity": ("model", "corpus", "context", "chunks"), "mslite": ("model",)}
DEFAULT_EXPECT = "int8"
DEFAULT_CONTEXT = 512
MARGIN_FACTOR = 2.0
MIN_EXCESS = 0.01
CORPUS_PART = "heldout"
RULE_VERSION = 1  # bump when the reference or the bound rule changes (invalidates the cache)


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
    # an ExecuTorch .pte harmony-ref runs and scores itself (job/runtime_check_program.py) in
    # place of a template: `model` is then the checkpoint it was exported from, `template` ""
    program: str | None = None

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
        if self.program is None:
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
    return score_for(check, (), progress, use_cache)[0]


def score_for(
    check: RuntimeCheck, programs=(), progress=None, use_cache: bool = True
) -> tuple[Reference, dict[str, dict]]:
    """reference_for's Reference, and the eval/lm.py summary (ppl, kld_mean, kld_p99,
    top1_agreement_pct) of each of `programs` (runtime/pte.py PteProgram's interface), keyed by
    its `name`, scored on the same chunks in the same pass as the reference and the `expect`
    policy: a program is never scored on another text than the reference's. With the Reference
    cached, only the programs run (the FP32 log-probs read from the shared cache)."""
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
    cached = None
    if use_cache and cache.is_file():
        try:
            d = json.loads(cache.read_text())
            cached = Reference(
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
    if cached is not None and not programs:
        return cached, {}
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
        variants=[] if cached is not None else [(expect, "fp16")],
        add_bos=tok.add_bos,
        progress=progress,
        reference_cache=shared,
        programs=programs,
    )
    res = r["results"]
    scored = {p.name: res[p.name] for p in programs}
    if cached is not None:
        return cached, scored
    ref = res["reference"]
    (variant,) = [v for k, v in res.items() if k != "reference" and k not in scored]
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
    return out, scored
