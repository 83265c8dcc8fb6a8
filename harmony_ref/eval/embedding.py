"""Accuracy of a quantization policy on real MiniLM weights: the evaluation set and its metrics.

Evaluation set: harmony_ref/data/paraphrase_pairs.tsv, sentence pairs written for this project
(everyday, technical, questions, negations, numbers, odd and long ones). Pairs come in groups of
near misses (the 5 pm train and the 7 am train; "I locked the door" and "I did not lock it"), so
a sentence's nearest neighbour is often a distractor: retrieval is not trivially 100%.

Metrics (`evaluate`): the accuracy ones are `numerical` (float kernels: identical on one machine,
last digits move with the CPU, BLAS and thread count; see harmony_ref/metrics.py), sizes exact:
- cosine of each sentence's policy embedding to its FP32 embedding: mean, min, 5th percentile;
- recall@1: a sentence's nearest neighbour (cosine, itself excluded) among all 2n sentences is its
  pair, for FP32 and for the policy; `accuracy_drop_pct` = FP32 recall@1 - policy recall@1 in
  percentage points (negative when quantization happens to help);
- top-1 neighbour agreement: the policy's nearest neighbour is FP32's, in %.

Per-layer sensitivity is eval/sensitivity.py, the weight-budget planner eval/plan.py.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from harmony_ref.metrics import NUMERICAL, Metrics
from harmony_ref.quant.policy import Policy
from harmony_ref.units import MB

PAIRS_COLUMNS = ("category", "group", "sentence_a", "sentence_b")


@dataclass(frozen=True)
class EvalSet:
    sentences: list[str]  # a's then b's: 2n sentences
    partner: np.ndarray  # (2n,) index of each sentence's paraphrase
    categories: list[str]
    source: str

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256("\n".join(self.sentences).encode()).hexdigest()


def load_pairs(path: str | Path | None = None) -> EvalSet:
    """Read a TSV of paraphrase pairs (header: category, group, sentence_a, sentence_b)."""
    if path is None:
        text = (resources.files("harmony_ref") / "data" / "paraphrase_pairs.tsv").read_text("utf-8")
        source = "harmony_ref/data/paraphrase_pairs.tsv"
    else:
        text, source = Path(path).read_text("utf-8"), str(path)
    reader = csv.DictReader(text.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE)
    if tuple(reader.fieldnames or ()) != PAIRS_COLUMNS:
        raise ValueError(f"{source}: header must be {PAIRS_COLUMNS}, got {reader.fieldnames}")
    a, b, cats = [], [], []
    for line, row in enumerate(reader, start=2):
        for col in PAIRS_COLUMNS:
            if not (row.get(col) or "").strip():
                raise ValueError(f"{source}: line {line}: field '{col}' is empty")
        a.append(row["sentence_a"].strip())
        b.append(row["sentence_b"].strip())
        cats.append(row["category"])
    n = len(a)
    if n < 2:
        raise ValueError(f"{source}: needs at least 2 pairs, got {n}")
    sentences = a + b
    seen = {}
    for i, s in enumerate(sentences):
        if s in seen:
            raise ValueError(
                f"{source}: sentence {s!r} appears twice (rows {seen[s] % n + 2} and {i % n + 2})"
            )
        seen[s] = i
    partner = np.concatenate([np.arange(n, 2 * n), np.arange(n)])
    return EvalSet(sentences, partner, cats + cats, source)


HELD_OUT_EVERY = 3  # the planner's split of the pairs: every third pair (i % 3 == 2) scores
MIN_HELD_OUT_PAIRS = 2  # recall@1 over one pair is its two sentences finding each other


def pair_subset(evalset: EvalSet, pairs, part: str) -> EvalSet:
    """The EvalSet of the pairs numbered `pairs` (in file order), its source naming `part`."""
    n = len(evalset.sentences) // 2
    idx = list(pairs)
    k = len(idx)
    return EvalSet(
        [evalset.sentences[i] for i in idx] + [evalset.sentences[n + i] for i in idx],
        np.concatenate([np.arange(k, 2 * k), np.arange(k)]),
        [evalset.categories[i] for i in idx] * 2,
        f"{evalset.source} ({part}: {k} pairs)",
    )


def split_pairs(evalset: EvalSet) -> tuple[EvalSet, EvalSet]:
    """(calibration, held-out): a plan is chosen on the first and scored on the second, pairs
    disjoint (every HELD_OUT_EVERY-th pair held out, by position). Too few pairs to hold out
    MIN_HELD_OUT_PAIRS is bad input (ValueError), not a plan scored on what chose it."""
    n = len(evalset.sentences) // 2
    held = [i for i in range(n) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1]
    if len(held) < MIN_HELD_OUT_PAIRS:
        need = MIN_HELD_OUT_PAIRS * HELD_OUT_EVERY
        raise ValueError(
            f"{evalset.source}: {n} pairs are too few to plan on some and score the plan on "
            f"others (every third pair is held out): need at least {need}"
        )
    fit = [i for i in range(n) if i % HELD_OUT_EVERY != HELD_OUT_EVERY - 1]
    return pair_subset(evalset, fit, "calibration"), pair_subset(evalset, held, "held-out")


def nearest_neighbours(emb: np.ndarray) -> np.ndarray:
    """Index of each row's most cosine-similar other row (rows are L2-normalised)."""
    sim = emb.astype(np.float64) @ emb.astype(np.float64).T
    np.fill_diagonal(sim, -np.inf)
    return sim.argmax(axis=1)


def compare(ref: np.ndarray, emb: np.ndarray, partner: np.ndarray) -> Metrics:
    """Metrics of `emb` (a policy's embeddings) against `ref` (FP32) on one evaluation set."""
    cos = np.sum(ref.astype(np.float64) * emb.astype(np.float64), axis=1)
    nn_ref, nn = nearest_neighbours(ref), nearest_neighbours(emb)
    recall_ref = 100.0 * np.mean(nn_ref == partner)
    recall = 100.0 * np.mean(nn == partner)
    m = Metrics()
    m.add(
        "accuracy_drop_pct",
        recall_ref - recall,
        "pct_points",
        "lower",
        NUMERICAL,
        description="FP32 recall@1 minus the policy's",
    )
    m.add(
        "recall_at_1",
        recall,
        "%",
        "higher",
        NUMERICAL,
        description="paraphrase is the nearest neighbour",
    )
    m.add("recall_at_1_fp32", recall_ref, "%", "none", NUMERICAL)
    m.add(
        "top1_agreement_pct",
        100.0 * np.mean(nn == nn_ref),
        "%",
        "higher",
        NUMERICAL,
        description="nearest neighbour same as FP32's",
    )
    m.add("cosine_mean", float(cos.mean()), "cosine", "higher", NUMERICAL)
    m.add("cosine_min", float(cos.min()), "cosine", "higher", NUMERICAL)
    m.add("cosine_p5", float(np.percentile(cos, 5)), "cosine", "higher", NUMERICAL)
    return m


def model_or_default(model=None):
    """`model`, or the real all-MiniLM-L6-v2 (downloaded and verified on first use)."""
    if model is not None:
        return model
    from harmony_ref.runtime.minilm import real_model

    return real_model()


def fp32_embeddings(model, evalset: EvalSet) -> np.ndarray:
    key = ("fp32-emb", evalset.fingerprint)
    cache = model.__dict__.setdefault("_emb_cache", {})
    if key not in cache:
        cache[key] = model.encode(evalset.sentences, "fp32")
    return cache[key]


def evaluate(
    policy: str | Path | Policy = "fp32",
    model=None,
    evalset: EvalSet | None = None,
    artifact_model=None,
) -> Metrics:
    """Accuracy metrics of `policy` (or of an exported artifact's model) against FP32."""
    model = model_or_default(model)
    evalset = evalset or load_pairs()
    ref = fp32_embeddings(model, evalset)
    if artifact_model is not None:
        emb, linear_bytes = (
            artifact_model.encode(evalset.sentences, None),
            artifact_model.linear_nbytes(None),
        )
    else:
        emb, linear_bytes = model.encode(evalset.sentences, policy), model.linear_nbytes(policy)
    m = compare(ref, emb, evalset.partner)
    m.add(
        "linear_weights_mb",
        linear_bytes / MB,
        "MB",
        "lower",
        description="the Linear weights in the policy's formats, scales and zero points included",
    )
    m.add(
        "weights_mb",
        (linear_bytes + model.other_nbytes()) / MB,
        "MB",
        "lower",
        description="all weights: Linears as above, embeddings/LayerNorm/bias in FP32",
    )
    m.add("sentences", len(evalset.sentences), "count", "none")
    return m
