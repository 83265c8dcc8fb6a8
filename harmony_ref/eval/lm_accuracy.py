"""LM accuracy of a decoder checkpoint under policies, from a model name to a table and metrics:
the one entry point `harmony-ref accuracy --model`, the main job's accuracy part and sweeps use.

    corpus = Corpus.shipped("heldout")          # or Corpus.from_file("my.txt")
    r = lm_accuracy("smollm2-135m", [("int4-g32", "fp16")], corpus, context=512, max_chunks=2)
    r.rows()                                    # one dict per row (reference first)
    lm_metrics(r, "int4-g32")                   # Metrics: lm_ppl, lm_ppl_ratio, lm_kld_mean, ...

The reference is always the checkpoint's weights dequantized exactly (REFERENCE_NOTE), run by
LlamaRef; its log-probs are cached on disk (eval/lm_cache.py) keyed by the model file's SHA-256,
the corpus's SHA-256, the context, the scoring rule and the code version, so a second policy or a
second run reuses them.

A user's corpus (--corpus FILE) is read only as far as needed: at most its first CORPUS_MAX_MB
MB (whole lines; the label says so when the file is longer), and tokenized in pieces of
CORPUS_PIECE_CHARS characters cut after a line only until the requested chunks x context tokens
(plus a margin) are had; that prefix is then tokenized whole, as a runtime tokenizes a file, so
the chunks scored are the ones the whole text gives. A text shorter than one piece (the shipped
corpora) is tokenized whole. `--chunks` beyond what the text gives is refused in one line
saying how many chunks it has. Metric kind: every LM metric is LM_METRIC_KIND, the gate's `numerical` class
(float kernels and BLAS: not bit-identical across machines, but repeatable on one).
"""

from __future__ import annotations

import codecs
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from harmony_ref.eval.lm import (
    CORPUS_SHA256,
    DEFAULT_CONTEXT,
    KLD_PERCENTILE,
    evaluate_lm,
    load_corpus,
)
from harmony_ref.eval.lm_cache import ReferenceCache
from harmony_ref.metrics import NUMERICAL, Metrics

REFERENCE_NOTE = "FP32 = the checkpoint's weights dequantized exactly"
LM_METRIC_KIND = NUMERICAL  # the one place the LM metrics' kind is declared
DEFAULT_LM_MODEL = "smollm2-135m"
CORPUS_MAX_MB = 4  # a --corpus file is read up to its first 4 MB (10**6 bytes): ~1M tokens
CORPUS_PIECE_CHARS = 1 << 18  # tokenized this many characters at a time (cut after a line)
CORPUS_MARGIN_TOKENS = 64  # tokens past the last chunk, so the prefix's cut never touches it


@dataclass(frozen=True)
class Corpus:
    name: str  # "heldout", "calibration" (shipped parts) or the file path
    text: str = field(repr=False)
    sha256: str

    @classmethod
    def shipped(cls, part: str = "heldout") -> Corpus:
        return cls(part, load_corpus(part), CORPUS_SHA256[part])

    @classmethod
    def from_file(cls, path) -> Corpus:
        """The first CORPUS_MAX_MB MB of `path` (whole lines), checked as UTF-8 text."""
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"--corpus {p}: no such file")
        limit = CORPUS_MAX_MB * 1_000_000
        with open(p, "rb") as f:
            data = f.read(limit + 1)
        truncated = len(data) > limit
        data = data[:limit]
        try:  # a character cut by the cap is not an error; one inside the text is
            text = codecs.getincrementaldecoder("utf-8")().decode(data, final=not truncated)
        except UnicodeDecodeError as e:
            raise ValueError(f"--corpus {p}: not UTF-8 text (byte {e.start}: {e.reason})") from e
        if truncated and "\n" in text:
            text = text[: text.rindex("\n") + 1]  # whole lines only
        if not text.strip():
            raise ValueError(f"--corpus {p}: the file is empty")
        name = f"{p} (its first {CORPUS_MAX_MB} MB)" if truncated else str(p)
        return cls(name, text, hashlib.sha256(text.encode("utf-8")).hexdigest())

    def tokens(self, tok, need: int | None) -> list[int]:
        """Token ids of the shortest prefix of the text, cut after a line, that holds `need`
        tokens and a margin, tokenized whole (see the module docstring); every token of the text
        when `need` is None or the text holds fewer."""
        text = self.text
        if need is None or len(text) <= CORPUS_PIECE_CHARS:
            return tok.encode(text)
        end, counted = 0, 0
        while end < len(text):
            cut = text.find("\n", end + CORPUS_PIECE_CHARS)
            cut = len(text) if cut < 0 else cut + 1
            counted += len(tok.encode(text[end:cut], add_bos=False))
            end = cut
            if counted >= need + CORPUS_MARGIN_TOKENS or end == len(text):
                ids = tok.encode(text[:end])
                if len(ids) >= need + CORPUS_MARGIN_TOKENS or end == len(text):
                    return ids
        return tok.encode(text)  # pragma: no cover - the loop returns at the end of the text

    @property
    def label(self) -> str:
        shipped = self.name in CORPUS_SHA256
        return f"harmony_ref/data/lm_corpus/{self.name}.txt" if shipped else self.name


CALIBRATION_LINE_CHARS = 40  # a calibration-text line this long found in a corpus: a copy


def reads_calibration_text(policy) -> bool:
    """Whether building `policy` reads the shipped calibration text (compress/observe.py): GPTQ /
    AWQ, static activation scales or a calibrated pruning step, on "corpus" or "generated"
    windows ("random" windows read no text)."""
    specs = []
    if policy.calibrated:
        specs.append(policy.quantize)
    if policy.activations is not None:
        specs.append(policy.activations)
    if policy.prune is not None and policy.prune.calibrates:
        specs.append(policy.prune)
    return any(getattr(s, "calibration", "corpus") != "random" for s in specs)


def check_calibration_disjoint(corpus: Corpus, policies) -> None:
    """Held out means held out: a corpus that holds the calibration text (the shipped
    calibration part itself, or any of its lines of CALIBRATION_LINE_CHARS+ characters) is not
    scored for a policy calibrated on that text; ValueError in one line naming both."""
    calibrating = [p for p in policies if not isinstance(p, str) and reads_calibration_text(p)]
    if not calibrating:
        return
    from harmony_ref.compress.observe import calibration_text

    text = calibration_text()
    lines = {ln.strip() for ln in corpus.text.splitlines()}
    copied = corpus.sha256 == CORPUS_SHA256["calibration"] or next(
        (
            i
            for i, ln in enumerate(text.splitlines(), start=1)
            if len(ln.strip()) >= CALIBRATION_LINE_CHARS and ln.strip() in lines
        ),
        None,
    )
    if copied:
        where = "" if copied is True else f" (its line {copied})"
        raise ValueError(
            f"corpus {corpus.label} holds the calibration text{where} that "
            f"{calibrating[0].name} is calibrated on: held out means held out, score another text"
        )


def check_chunks(chunks: int | None, in_text: int, label: str, context: int) -> None:
    """--chunks more than the text gives is bad input, not silently fewer chunks."""
    if chunks is not None and chunks > in_text:
        raise ValueError(
            f"--chunks {chunks}: corpus {label} has {in_text} chunks of --context {context}"
        )


@dataclass
class LMAccuracy:
    model: str  # as given (shipped name or path)
    model_label: str  # the checkpoint named, with its stored formats
    corpus: Corpus
    context: int
    result: dict  # evaluate_lm's dict
    variants: list = field(default_factory=list)  # (row name, policy name, kv dtype)

    @property
    def scored_tokens(self) -> int:
        return self.result["chunks"] * self.result["scored_tokens_per_chunk"]

    def title(self) -> str:
        r = self.result
        subset = (
            ""
            if r["chunks"] == r["chunks_in_text"]
            else f" (the first {r['chunks']} of {r['chunks_in_text']} chunks)"
        )
        return (
            f"{self.model_label}; reference: {REFERENCE_NOTE}; corpus {self.corpus.label}, "
            f"{r['tokens']} tokens; context {r['context']}, {r['chunks']} chunks{subset}, "
            f"{self.scored_tokens} scored tokens (second half of each chunk)"
        )

    def rows(self) -> list[dict]:
        kinds = {name: (pol, kv) for name, pol, kv in self.variants}
        out = []
        for name, s in self.result["results"].items():
            pol, kv = ("FP32 reference (NumPy)", "fp32") if name == "reference" else kinds[name]
            out.append(
                {
                    "policy": pol,
                    "kv_cache": kv,
                    "ppl": s["ppl"],
                    "ppl_ratio": s["ppl_ratio"],
                    "kld_mean": s["kld_mean"],
                    "kld_p99": s[f"kld_p{KLD_PERCENTILE:g}"],
                    "top1_agreement_pct": s["top1_agreement_pct"],
                    "scored_tokens": s["scored_tokens"],
                }
            )
        return out

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "model_label": self.model_label,
            "reference": REFERENCE_NOTE,
            "corpus": self.corpus.label,
            "corpus_sha256": self.corpus.sha256,
            "context": self.context,
            **{k: v for k, v in self.result.items() if k != "results"},
            "scored_tokens": self.scored_tokens,
            "rows": self.rows(),
        }


MARKDOWN_HEADER = (
    "| policy | KV cache | PPL | PPL / FP32 | KLD mean | KLD p99 | top-1 agreement "
    "|\n|---|---|---|---|---|---|---|"
)


def markdown_rows(d: dict, skip_reference: bool = False) -> list[str]:
    """The README's table rows from an accuracy result's dict form (LMAccuracy.to_dict(), what
    `harmony-ref accuracy --json` prints), numbers rounded as the README shows them."""
    out = []
    for i, r in enumerate(d["rows"]):
        if i == 0 and skip_reference:
            continue
        out.append(
            f"| {r['policy']} | {r['kv_cache']} | {r['ppl']:.3f} | {r['ppl_ratio']:.4f} | "
            f"{r['kld_mean']:.4f} | {r['kld_p99']:.4f} | "
            f"{r['top1_agreement_pct']:.1f} % |"
        )
    return out


def model_sha256(model: str, path: Path) -> str:
    """SHA-256 of the checkpoint: the pinned one for the shipped GGUF (verified when fetched),
    else of the file, or of an HF directory's config.json and weight files in name order."""
    from harmony_ref.checkpoint.assets import sha256_file

    if model == DEFAULT_LM_MODEL:
        from harmony_ref.checkpoint.smollm2 import GGUF_SHA256

        return GGUF_SHA256
    if model == "gemma3-270m":
        from harmony_ref.checkpoint import gemma3

        return gemma3.GGUF_SHA256
    if path.is_file():
        return sha256_file(path)
    h = hashlib.sha256()
    for f in sorted(path.iterdir()):
        if f.name == "config.json" or f.suffix == ".safetensors":
            h.update(f.name.encode() + sha256_file(f).encode())
    return h.hexdigest()


def variant_name(policy, kv: str) -> str:
    name = policy if isinstance(policy, str) else policy.name
    return name + ("" if kv == "fp16" else f"+kv-{kv}")


def lm_accuracy(
    model: str = DEFAULT_LM_MODEL,
    variants=(("int4-g32", "fp16"),),
    corpus: Corpus | None = None,
    context: int = DEFAULT_CONTEXT,
    max_chunks: int | None = None,
    progress=None,
    loaded=None,
    use_cache: bool = True,
    programs=(),
) -> LMAccuracy:
    """Score `variants` ((policy, kv dtype) pairs) of `model` on `corpus` (default: the shipped
    held-out part). `loaded`: (weights, tokenizer) already read, to skip reading the checkpoint.
    Bad input (unknown model, unreadable checkpoint, a corpus shorter than one chunk, a bad
    policy) raises ValueError before any scoring. `programs`: (program, policy name, runtime)
    triples, another runtime's model of the same checkpoint (runtime/pte.py PteProgram), scored
    beside the variants, each a row whose kv_cache column names the runtime."""
    from harmony_ref.quant.policy import AS_STORED, load_policy
    from harmony_ref.runtime.loader import (
        load_decoder,
        model_label,
        resolve_model_path,
        stored_policy,
    )

    corpus = corpus or Corpus.shipped("heldout")
    as_stored = any(p == AS_STORED for p, _ in variants)
    # bad names fail here, first (as-stored is resolved from the file once it is read)
    policies = [(p if p == AS_STORED else load_policy(p), kv) for p, kv in variants]
    for _, kv in policies:
        if kv not in ("fp16", "int8"):
            raise ValueError(f"--kv-dtype must be fp16 or int8, got {kv!r}")
    check_calibration_disjoint(corpus, [p for p, _ in policies])
    path = resolve_model_path(model)
    if as_stored and (loaded is None or not loaded[0].stored):
        loaded = load_decoder(model, keep_stored=True)
    weights, tok = loaded or load_decoder(model)
    if as_stored:
        stored = stored_policy(weights, model)
        policies = [(stored if p == AS_STORED else p, kv) for p, kv in policies]
    if context > weights.config.max_positions:
        raise ValueError(
            f"--context {context} exceeds {model}'s {weights.config.max_positions} positions"
        )
    ids = corpus.tokens(tok, None if max_chunks is None else max_chunks * context)
    if len(ids) < context:
        raise ValueError(
            f"corpus {corpus.label}: {len(ids)} tokens, fewer than one chunk of context {context}"
        )
    check_chunks(max_chunks, len(ids) // context, corpus.label, context)
    cache = None
    if use_cache:
        cache = ReferenceCache.for_run(
            model_sha256(model, path), corpus.sha256, context, tok.add_bos
        )
    result = evaluate_lm(
        weights,
        ids,
        context,
        policies,
        add_bos=tok.add_bos,
        progress=progress,
        max_chunks=max_chunks,
        reference_cache=cache,
        programs=[prog for prog, _, _ in programs],
    )
    rows = [(variant_name(p, kv), p.name, kv) for p, kv in policies]
    rows += [(prog.name, pol, runtime) for prog, pol, runtime in programs]
    return LMAccuracy(model, model_label(model, weights), corpus, context, result, rows)


# metric name -> (row key, unit, direction, what it is)
LM_METRICS = {
    "lm_ppl": ("ppl", "ppl", "lower", "perplexity"),
    "lm_ppl_ratio": ("ppl_ratio", "x", "lower", "perplexity / the FP32 reference's"),
    "lm_kld_mean": ("kld_mean", "nats", "lower", "mean KL(FP32 || policy) per scored token"),
    "lm_kld_p99": ("kld_p99", "nats", "lower", "99th percentile of KL(FP32 || policy)"),
    "lm_top1_agreement_pct": (
        "top1_agreement_pct",
        "%",
        "higher",
        "scored tokens whose argmax equals the FP32 reference's",
    ),
}


def lm_metrics(acc: LMAccuracy, variant: str | None = None) -> Metrics:
    """Record metrics of one variant (default: the first): each names the model, the corpus and
    the context in its description; plus the reference's own perplexity and the scored tokens."""
    names = [name for name, _, _ in acc.variants]
    variant = variant or names[0]
    if variant not in names:
        raise ValueError(f"no variant {variant!r} was scored (scored: {', '.join(names)})")
    rows = acc.rows()
    row, ref = rows[1 + names.index(variant)], rows[0]
    where = (
        f"{acc.model_label}, {acc.corpus.label}, context {acc.context}, "
        f"{acc.result['chunks']} chunks, {acc.scored_tokens} scored tokens"
    )
    m = Metrics()
    for name, (key, unit, direction, what) in LM_METRICS.items():
        m.add(
            name,
            row[key],
            unit,
            direction,
            LM_METRIC_KIND,
            description=f"{what}; {variant} on {where}; {REFERENCE_NOTE}",
        )
    m.add(
        "lm_ppl_fp32",
        ref["ppl"],
        "ppl",
        "none",
        LM_METRIC_KIND,
        description=f"perplexity of the FP32 reference on {where}",
    )
    m.add(
        "lm_scored_tokens",
        acc.scored_tokens,
        "tokens",
        "none",
        "exact",
        description=f"tokens scored: {where}",
    )
    return m
