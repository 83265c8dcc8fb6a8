"""Accuracy of a quantization policy on real MiniLM weights: metrics, per-layer sensitivity and a
weight-budget planner.

Evaluation set: harmony_ref/data/paraphrase_pairs.tsv, sentence pairs written for this project
(everyday, technical, questions, negations, numbers, odd and long ones). Pairs come in groups of
near misses (the 5 pm train and the 7 am train; "I locked the door" and "I did not lock it"), so
a sentence's nearest neighbour is often a distractor: retrieval is not trivially 100%.

Metrics (`evaluate`), all exact (deterministic functions of weights, policy and sentences):
- cosine of each sentence's policy embedding to its FP32 embedding: mean, min, 5th percentile;
- recall@1: a sentence's nearest neighbour (cosine, itself excluded) among all 2n sentences is its
  pair, for FP32 and for the policy; `accuracy_drop_pct` = FP32 recall@1 - policy recall@1 in
  percentage points (negative when quantization happens to help);
- top-1 neighbour agreement: the policy's nearest neighbour is FP32's, in %.

Sensitivity (`layer_losses`, `sensitivity`): one Linear at a time in a format, all others FP32.
Recall moves in steps of 1/2n and mostly does not move at all for one layer, so layers are ranked
by a continuous loss, `cosine_loss` = 1 - mean cosine to FP32, and the recall drop is reported
beside it. The layers before the one under test compute exactly what FP32 does, so their output
is cached and each run starts at the layer under test. Results are cached on disk per (weights,
sentences, format) under the cache directory.

Planner (`plan`): a multiple-choice knapsack. Each Linear l gets one format f of {fp16, int8,
int4-g128, int4-g32}, costing bytes(l, f) (the real stored size, scales and zero points included)
and loss(l, f) = its measured cosine_loss alone. Assuming losses add across layers (checked: the
planner reports the predicted sum beside the measured loss of the policy it picked), the total
loss is minimised under sum bytes <= budget by dynamic programming over the budget in 1 kB steps
(sizes rounded up, so the result always fits). This is exact for the additive model, unlike a
greedy by loss per byte, which can strand budget. The policy it returns names every Linear in a
[layers] table; the planner then measures it like any other policy.
The budget covers the Linear weights, the only tensors a policy formats; embeddings, LayerNorms
and biases stay FP32 and are reported separately.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from harmony_ref.metrics import Metrics
from harmony_ref.quant.policy import Policy, WeightFormat, parse_format
from harmony_ref.track.record import write_text_atomic
from harmony_ref.units import MB

PAIRS_COLUMNS = ("category", "group", "sentence_a", "sentence_b")
PLANNER_FORMATS = ("fp16", "int8", "int4-g128", "int4-g32")
PLANNER_STEP_BYTES = 1000
LOSS_CACHE_VERSION = 2  # bump when the forward or the loss definition changes


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
            raise ValueError(f"{source}: sentence {s!r} appears twice (rows {seen[s] % n + 2} "
                             f"and {i % n + 2})")
        seen[s] = i
    partner = np.concatenate([np.arange(n, 2 * n), np.arange(n)])
    return EvalSet(sentences, partner, cats + cats, source)


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
    m.add("accuracy_drop_pct", recall_ref - recall, "pct_points", "lower",
          description="FP32 recall@1 minus the policy's")
    m.add("recall_at_1", recall, "%", "higher", description="paraphrase is the nearest neighbour")
    m.add("recall_at_1_fp32", recall_ref, "%", "none")
    m.add("top1_agreement_pct", 100.0 * np.mean(nn == nn_ref), "%", "higher",
          description="nearest neighbour same as FP32's")
    m.add("cosine_mean", float(cos.mean()), "cosine", "higher")
    m.add("cosine_min", float(cos.min()), "cosine", "higher")
    m.add("cosine_p5", float(np.percentile(cos, 5)), "cosine", "higher")
    return m


def _model(model=None):
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


def evaluate(policy: str | Path | Policy = "fp32", model=None, evalset: EvalSet | None = None,
             artifact_model=None) -> Metrics:
    """Accuracy metrics of `policy` (or of an exported artifact's model) against FP32."""
    model = _model(model)
    evalset = evalset or load_pairs()
    ref = fp32_embeddings(model, evalset)
    if artifact_model is not None:
        emb, linear_bytes = artifact_model.encode(evalset.sentences, None), \
            artifact_model.linear_nbytes(None)
    else:
        emb, linear_bytes = model.encode(evalset.sentences, policy), model.linear_nbytes(policy)
    m = compare(ref, emb, evalset.partner)
    m.add("linear_weights_mb", linear_bytes / MB, "MB", "lower",
          description="the Linear weights in the policy's formats, scales and zero points included")
    m.add("weights_mb", (linear_bytes + model.other_nbytes()) / MB, "MB", "lower",
          description="all weights: Linears as above, embeddings/LayerNorm/bias in FP32")
    m.add("sentences", len(evalset.sentences), "count", "none")
    return m


# ----------------------------------------------------------------------------------------------
# Sensitivity


def _model_fingerprint(model) -> str:
    h = hashlib.sha256()
    for name in model.linear_names():
        h.update(name.encode())
        h.update(np.ascontiguousarray(model.params[name + ".weight"]).tobytes())
    return h.hexdigest()


def _loss_cache_path(model, evalset: EvalSet, fmt: WeightFormat) -> Path | None:
    if os.environ.get("HARMONY_REF_NO_LOSS_CACHE"):
        return None
    from harmony_ref.checkpoint.assets import cache_dir

    key = hashlib.sha256(f"{LOSS_CACHE_VERSION}|{_model_fingerprint(model)}|"
                         f"{evalset.fingerprint}|{fmt.name}|{model.resolved_backend()}".encode()).hexdigest()[:32]
    return cache_dir() / "layer-losses" / f"{fmt.name}-{key}.json"


def layer_losses(fmt: str | WeightFormat = "int4-g32", model=None,
                 evalset: EvalSet | None = None, progress: bool = False) -> list[dict]:
    """One row per Linear: that layer alone in `fmt`, all others FP32, measured on the eval set.
    Keys: layer, format, cosine_loss, cosine_min, accuracy_drop_pct, top1_agreement_pct,
    bytes_fp32, bytes."""
    model = _model(model)
    evalset = evalset or load_pairs()
    fmt = parse_format(fmt) if isinstance(fmt, str) else fmt
    path = _loss_cache_path(model, evalset, fmt)
    if path is not None and path.is_file():
        try:
            rows = json.loads(path.read_text())["rows"]
            if [r["layer"] for r in rows] == model.linear_names():
                return rows
        except (ValueError, KeyError, TypeError):
            pass  # a damaged cache file is measured again and overwritten

    ref = fp32_embeddings(model, evalset)
    fp32 = model.linears("fp32")
    batches = model.batches(evalset.sentences)
    # FP32 input of every encoder layer, per batch: runs for layer i start from inputs[b][i].
    inputs = []
    for b in batches:
        h, per = model.embed(b), []
        for i in range(model.n_layers):
            per.append(h)
            h = model.layer(h, b.mask, i, fp32)
        inputs.append(per)

    names = model.linear_names()
    # Quantize everything first: Numba's parallel quantizers leave threads spinning for a while,
    # which slows the BLAS calls right after them.
    quantized = {name: model.make_linear(name, fmt) for name in names}
    rows = []
    task = None
    if progress:
        from rich.progress import Progress

        bar = Progress(transient=True)
        bar.start()
        task = bar.add_task(f"sensitivity: each Linear alone in {fmt.name}", total=len(names))
    try:
        for name in names:
            i = int(name.split(".")[2])
            lin = dict(fp32)
            lin[name] = quantized[name]
            emb = np.empty_like(ref)
            for b, per in zip(batches, inputs):
                emb[b.index] = model.pool(model.run_layers(per[i], b.mask, lin, start=i), b.mask)
            m = compare(ref, emb, evalset.partner)
            n, k = model.params[name + ".weight"].shape
            rows.append({
                "layer": name, "format": fmt.name,
                "cosine_loss": 1.0 - m.value("cosine_mean"),
                "cosine_min": m.value("cosine_min"),
                "accuracy_drop_pct": m.value("accuracy_drop_pct"),
                "top1_agreement_pct": m.value("top1_agreement_pct"),
                "bytes_fp32": 4 * n * k, "bytes": lin[name].nbytes,
            })
            if task is not None:
                bar.advance(task)
    finally:
        if task is not None:
            bar.stop()
    if path is not None:
        write_text_atomic(path, json.dumps({"format": fmt.name, "rows": rows}))
    return rows


def sensitivity(fmt: str = "int4-g32", model=None, evalset: EvalSet | None = None,
                progress: bool = False):
    """Layers ranked by cosine loss (most sensitive first), as a pandas DataFrame."""
    import pandas as pd

    df = pd.DataFrame(layer_losses(fmt, model, evalset, progress))
    df = df.sort_values(["cosine_loss", "accuracy_drop_pct"], ascending=False, kind="stable")
    df.insert(0, "rank", range(1, len(df) + 1))
    df["drop_rank"] = df["accuracy_drop_pct"].rank(ascending=False, method="min").astype(int)
    return df.reset_index(drop=True)


# ----------------------------------------------------------------------------------------------
# Planner


def choose_formats(cost: np.ndarray, loss: np.ndarray, cap: int) -> list[int]:
    """Multiple-choice knapsack: one option per row minimising the summed loss with the summed
    integer cost <= cap. cost, loss: (layers, options). Dynamic programming, O(layers x options
    x cap); raises ValueError if even the cheapest options exceed cap."""
    n_layers, n_opts = cost.shape
    if cost.min(axis=1).sum() > cap:
        raise ValueError(f"no choice fits: the cheapest costs {cost.min(axis=1).sum()} > {cap}")
    best = np.zeros(cap + 1)  # best[c]: min loss of the rows so far within c
    pick = np.zeros((n_layers, cap + 1), dtype=np.int16)
    for li in range(n_layers):
        new = np.full(cap + 1, np.inf)
        for fi in range(n_opts):
            c = int(cost[li, fi])
            if c > cap:
                continue
            cand = np.full(cap + 1, np.inf)
            cand[c:] = best[: cap + 1 - c] + loss[li, fi]
            better = cand < new
            new[better] = cand[better]
            pick[li, better] = fi
        best = new
    c = cap  # best is non-increasing in c, so the full budget holds an optimum
    out = [0] * n_layers
    for li in range(n_layers - 1, -1, -1):
        out[li] = int(pick[li, c])
        c -= int(cost[li, out[li]])
    return out


@dataclass(frozen=True)
class Plan:
    policy: Policy
    budget_bytes: int
    linear_bytes: int
    predicted_cosine_loss: float  # sum of the chosen layers' losses measured alone
    choices: dict[str, str]


def plan_policy(budget_mb: float, model=None, evalset: EvalSet | None = None,
                formats: tuple[str, ...] = PLANNER_FORMATS, progress: bool = False,
                name: str | None = None) -> Plan:
    """The per-Linear formats minimising the summed measured cosine loss within `budget_mb` MB of
    Linear weights (multiple-choice knapsack by dynamic programming, see the module docstring)."""
    model = _model(model)
    evalset = evalset or load_pairs()
    if not budget_mb > 0:
        raise ValueError(f"budget_mb must be positive, got {budget_mb!r}")
    budget = int(budget_mb * MB)
    names = model.linear_names()
    # Sizes are known before anything is measured: refuse an impossible budget up front, not
    # after minutes of sensitivity runs.
    shapes = [model.params[n + ".weight"].shape for n in names]
    smallest = sum(min(parse_format(f).nbytes(*shape) for f in formats) for shape in shapes)
    if smallest > budget:
        raise ValueError(f"budget {budget_mb} MB is below the smallest possible Linear weights "
                         f"({smallest / MB:.3f} MB with every layer in its smallest format)")
    tables = {f: {r["layer"]: r for r in layer_losses(f, model, evalset, progress)} for f in formats}
    # (layers, formats) cost in steps (rounded up) and loss
    cost = np.array([[-(-tables[f][n]["bytes"] // PLANNER_STEP_BYTES) for f in formats] for n in names])
    loss = np.array([[max(tables[f][n]["cosine_loss"], 0.0) for f in formats] for n in names])
    cap = budget // PLANNER_STEP_BYTES
    picks = choose_formats(cost, loss, cap)  # ValueError if rounding up to steps no longer fits
    choices = {n: formats[fi] for n, fi in zip(names, picks)}
    total = sum(tables[choices[n]][n]["bytes"] for n in names)
    predicted = sum(max(tables[choices[n]][n]["cosine_loss"], 0.0) for n in names)
    policy = Policy(
        name=name or f"plan-{budget_mb:g}mb",
        default=parse_format(formats[-1]),
        layers=tuple((n, parse_format(f)) for n, f in choices.items()),
        description=(f"harmony-ref plan --budget-mb {budget_mb:g}: per-Linear formats minimising "
                     f"the summed measured cosine loss on {len(evalset.sentences)} sentences"),
    )
    return Plan(policy, budget, total, predicted, choices)
