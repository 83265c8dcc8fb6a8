"""Sensitivity and the weight-budget planner on a decoder, by KL divergence to the FP32 reference.

    rows = lm_sensitivity("smollm2-135m", "int4-g32", by="type")    # one row per Linear type
    rows = lm_sensitivity("smollm2-135m", "int4-g32", by="block")   # one row per block
    plan = lm_plan("smollm2-135m", budget_mb=40)                    # a Policy within 40 MB

Sensitivity: one group alone in the format, everything else FP32 (the FP32 weights as read, run
by the kernel path), scored against the FP32 reference (eval/lm.py): KLD mean / p99, PPL ratio,
top-1 agreement. Groups: `type` (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj
across every block, and the output head `lm_head`) or `block` (every Linear of block i).

Held out means held out: sensitivity and planning score the shipped corpus's `calibration` part
only; the planned policy is then scored on the `heldout` part, which planning never saw.

The planner is the multiple-choice knapsack of eval/plan.py (choose_formats: exact dynamic
programming in 1 kB steps, sizes rounded up) over the eight Linear types, each taking one of
fp16 / int8 / int4-g128 / int4-g32 in every block, cost = the stored bytes of that type in all
blocks, loss = its measured KLD mean alone; the prediction (sum of the chosen types' KLDs) is
reported beside the measured KLD of the plan. The budget covers the Linear weights (the output
head included, tied or not); the embedding table and the norms stay FP32 and are not counted.
Rows are cached on disk per (model file, corpus, context, chunks, format, grouping, code version)
under $HARMONY_REF_CACHE/lm-sensitivity/ (HARMONY_REF_NO_LM_CACHE=1: off).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np

from harmony_ref._io import write_text_atomic
from harmony_ref.eval.lm import DEFAULT_CONTEXT, LAYER_TYPES, evaluate_lm
from harmony_ref.eval.lm_accuracy import Corpus, model_sha256
from harmony_ref.eval.lm_cache import ReferenceCache, cache_root, code_version
from harmony_ref.eval.plan import PLANNER_FORMATS, PLANNER_STEP_BYTES, choose_formats
from harmony_ref.quant.policy import Policy, int4_format_for_rows, parse_format, policy_from_dict
from harmony_ref.units import MB

GROUPINGS = ("type", "block")
CALIBRATION = "calibration"  # the corpus part sensitivity and planning score


def group_patterns(config, by: str) -> list[tuple[str, str]]:
    """(group name, policy pattern) for every group of a decoder."""
    if by == "type":
        return [(t, "lm_head" if t == "lm_head" else f"*.{t}") for t in LAYER_TYPES]
    if by == "block":
        return [(f"block {i}", f"model.layers.{i}.*") for i in range(config.n_layers)]
    raise ValueError(f"--by must be one of {', '.join(GROUPINGS)}, got {by!r}")


def group_shapes(config, group: str, by: str) -> list[tuple[int, int]]:
    """(N, K) of every Linear in a group."""
    d, q, kv, f = config.dim, config.q_dim, config.kv_dim, config.ffn_dim
    shape = {"q_proj": (q, d), "k_proj": (kv, d), "v_proj": (kv, d), "o_proj": (d, q),
             "gate_proj": (f, d), "up_proj": (f, d), "down_proj": (d, f)}
    if by == "block":
        return list(shape.values())
    if group == "lm_head":
        return [(config.vocab_size, d)]
    return [shape[group]] * config.n_layers


def stored_bytes(fmt, shapes) -> int:
    """Bytes of the shapes in `fmt` as the runtime stores them (INT4 groups narrowed to K)."""
    return sum((int4_format_for_rows(fmt, k) if fmt.kind == "int4" else fmt).nbytes(n, k)
               for n, k in shapes)


def _rows_cache_path(model: str, path, corpus: Corpus, context: int, chunks, fmt, by: str):
    root = cache_root()
    if root is None:
        return None
    key = hashlib.sha256("|".join([model_sha256(model, path), corpus.sha256, str(context),
                                   str(chunks), fmt.name, by, code_version()]).encode())
    return root.parent / "lm-sensitivity" / f"{fmt.name}-{by}-{key.hexdigest()[:32]}.json"


def lm_sensitivity(model: str = "smollm2-135m", fmt: str = "int4-g32", by: str = "type",
                   context: int = DEFAULT_CONTEXT, chunks: int | None = None, progress=None,
                   loaded=None, corpus: Corpus | None = None) -> list[dict]:
    """One row per group (see the module doc), in group order, scored on the calibration part.
    Keys: group, pattern, format, kld_mean, kld_p99, ppl_ratio, top1_agreement_pct, bytes,
    bytes_fp32, scored_tokens. `progress(done, total)` is called after every chunk."""
    from harmony_ref.runtime.loader import load_decoder_shared, resolve_model_path

    f = parse_format(fmt, "--format")
    path = resolve_model_path(model)
    corpus = corpus or Corpus.shipped(CALIBRATION)
    weights, tok = loaded or load_decoder_shared(model)
    groups = group_patterns(weights.config, by)
    cache_path = _rows_cache_path(model, path, corpus, context, chunks, f, by)
    if cache_path is not None and cache_path.is_file():
        try:
            rows = json.loads(cache_path.read_text())["rows"]
            if [r["group"] for r in rows] == [g for g, _ in groups]:
                return rows
        except (ValueError, KeyError, TypeError):
            pass  # damaged: measured again and overwritten
    ids = tok.encode(corpus.text)
    ref_cache = ReferenceCache.for_run(model_sha256(model, path), corpus.sha256, context,
                                       tok.add_bos)
    n_chunks = min(chunks or len(ids) // context, len(ids) // context)
    rows = []
    for gi, (group, pattern) in enumerate(groups):
        policy = policy_from_dict({"name": f"{group}@{f.name}", "default": "fp32",
                                   "layers": {pattern: f.name}}, f"<{group} alone in {f.name}>")
        step = (lambda done, total, gi=gi: progress(gi * n_chunks + done, len(groups) * n_chunks)
                ) if progress else None
        r = evaluate_lm(weights, ids, context, [(policy, "fp16")], add_bos=tok.add_bos,
                        progress=step, max_chunks=chunks, reference_cache=ref_cache)
        s = r["results"][policy.name]
        shapes = group_shapes(weights.config, group, by)
        rows.append({"group": group, "pattern": pattern, "format": f.name,
                     "kld_mean": s["kld_mean"], "kld_p99": s["kld_p99"],
                     "ppl_ratio": s["ppl_ratio"], "top1_agreement_pct": s["top1_agreement_pct"],
                     "bytes": stored_bytes(f, shapes),
                     "bytes_fp32": stored_bytes(parse_format("fp32"), shapes),
                     "scored_tokens": s["scored_tokens"], "corpus": corpus.label})
    if cache_path is not None:
        write_text_atomic(cache_path, json.dumps({"format": f.name, "by": by, "rows": rows}))
    return rows


@dataclass(frozen=True)
class LMPlan:
    policy: Policy
    budget_bytes: int
    linear_bytes: int
    predicted_kld: float  # sum of the chosen types' KLD measured alone (calibration part)
    choices: dict[str, str]  # type -> format
    calibration_scored_tokens: int


def lm_plan(model: str = "smollm2-135m", budget_mb: float = 40.0,
            formats: tuple[str, ...] = PLANNER_FORMATS, context: int = DEFAULT_CONTEXT,
            chunks: int | None = None, progress=None, loaded=None) -> LMPlan:
    """Per-type formats minimising the summed KLD (calibration part) within `budget_mb` MB of
    Linear weights. An impossible budget is refused before anything is measured."""
    from harmony_ref.runtime.loader import checkpoint_config

    if not budget_mb > 0:
        raise ValueError(f"--budget-mb must be positive, got {budget_mb!r}")
    fmts = [parse_format(f) for f in formats]
    config = checkpoint_config(model)
    types = [g for g, _ in group_patterns(config, "type")]
    sizes = [[stored_bytes(f, group_shapes(config, t, "type")) for f in fmts] for t in types]
    budget = int(budget_mb * MB)
    smallest = sum(min(s) for s in sizes)
    if smallest > budget:
        raise ValueError(f"--budget-mb {budget_mb:g} is below the smallest possible Linear "
                         f"weights of {model} ({smallest / MB:.2f} MB, every type in its "
                         "smallest format)")
    tables = []
    for fi, f in enumerate(fmts):
        step = (lambda d, t, fi=fi: progress(fi * t + d, len(fmts) * t)) if progress else None
        tables.append(lm_sensitivity(model, f.name, "type", context, chunks, step, loaded))
    cost = np.array([[-(-sizes[ti][fi] // PLANNER_STEP_BYTES) for fi in range(len(fmts))]
                     for ti in range(len(types))])
    loss = np.array([[max(tables[fi][ti]["kld_mean"], 0.0) for fi in range(len(fmts))]
                     for ti in range(len(types))])
    picks = choose_formats(cost, loss, budget // PLANNER_STEP_BYTES)
    choices = {t: fmts[fi].name for t, fi in zip(types, picks)}
    patterns = dict(group_patterns(config, "type"))
    policy = policy_from_dict({
        "name": f"plan-{model.replace('/', '_')}-{budget_mb:g}mb", "default": "fp32",
        "description": (f"harmony-ref plan --model {model} --budget-mb {budget_mb:g}: per-type "
                        "formats minimising the summed KLD on the calibration corpus"),
        "layers": {patterns[t]: f for t, f in choices.items()}}, "<plan>")
    return LMPlan(policy, budget, sum(sizes[ti][fi] for ti, fi in enumerate(picks)),
                  float(sum(loss[ti, fi] for ti, fi in enumerate(picks))), choices,
                  tables[0][0]["scored_tokens"])


__all__ = ["GROUPINGS", "LMPlan", "group_patterns", "lm_plan", "lm_sensitivity"]
