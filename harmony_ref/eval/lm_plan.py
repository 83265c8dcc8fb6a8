"""Sensitivity and the weight-budget planner on a decoder, by KL divergence to the FP32 reference.

    rows = lm_sensitivity("smollm2-135m", "int4-g32", by="type")    # one row per Linear type
    rows = lm_sensitivity("smollm2-135m", "int4-g32", by="block")   # one row per block
    rows = lm_sensitivity("smollm2-135m", "w8a8-per-channel")       # int8 W8A8, one type each
    rows = lm_sensitivity("smollm2-135m", prune={"ffn": 0.1}, prune_score="activation")
    plan = lm_plan("smollm2-135m", budget_mb=40)                    # a Policy within 40 MB
    plan = lm_plan("smollm2-135m", 60, prune_ffn=(0, 0.1, 0.25), prune_heads=(0, 0.25))

Sensitivity: one group alone in the format, everything else FP32 (the FP32 weights as read, run
by the kernel path), scored against the FP32 reference (eval/lm.py): KLD mean / p99, PPL ratio,
top-1 agreement. Groups: `type` (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj
across every block, and the output head `lm_head`) or `block` (every Linear of block i).
`method` ("rtn", "gptq", "awq") fits the group's int4 / int8 weights by that method
(quant/gptq.py, quant/awq.py; the [quantize] defaults, calibrated, like W8A8, on the tokens of the
calibration part the rows never score). A format `w8a8-per-channel` / `w8a8-per-tensor` / `w8a8-smooth` (`w8a8`: per-channel) puts the
group's Linears in int8 with static activation scales (the policy's [activations] table with
its defaults, quant/compress.py). With `prune` (ratios
{"ffn": r} and/or {"heads": r}, `prune_score` "l1" or "activation") the weights stay FP32 and the
group is pruned instead: by `type` the rows are `ffn` (every block's FFN at the ratio) and
`heads` (every block's heads), by `block` one block at a time at the given ratios; `bytes` are
the group's FP32 Linears at the pruned shapes, `bytes_fp32` unpruned.

Held out means held out: sensitivity and planning score the shipped corpus's `calibration` part
only; the planned policy is then scored on the `heldout` part, which planning never saw. Within
sensitivity, W8A8 scales and activation pruning scores calibrate on the tokens of that part its
rows never score (each chunk's context half and the tail: eval/lm.py unscored_tokens), so no
row is scored on text it was calibrated on.

With `methods` (e.g. ("rtn", "gptq")) each int4 / int8 option is measured once per method and
the knapsack chooses among (format, method) pairs: a method changes the loss, not the bytes, so
each type's option in a format is that format's best method; the planned policy names the
chosen methods in [quantize.methods].

The planner is the multiple-choice knapsack of eval/plan.py (choose_formats: exact dynamic
programming in 1 kB steps, sizes rounded up) over the eight Linear types, each taking one of
fp16 / int8 / int4-g128 / int4-g32 in every block, cost = the stored bytes of that type in all
blocks, loss = its measured KLD mean alone; the prediction (sum of the chosen types' KLDs) is
reported beside the measured KLD of the plan. The budget covers the Linear weights (the output
head included, tied or not); the embedding table and the norms stay FP32 and are not counted.
`activations` (a granularity) plans a W8A8 model: the int8 option is measured as W8A8 and the
planned policy carries the [activations] table. With pruning ratios (`prune_ffn`, `prune_heads`,
uniform across blocks so the device model can cost the shapes) the knapsack's items become
groups: `ffn` = (ratio, gate, up, down formats), `attention` = (heads ratio, q, k, v, o
formats), `lm_head` = format; cost = the stored bytes at the pruned shapes (model/prune.py's
kept counts: pruned_spec), loss = the ratio's pruning KLD alone (FP32 weights) + the formats'
KLDs alone at the unpruned shapes. That additivity is an approximation, reported as predicted
beside the held-out measurement. Without pruning ratios the planner is the per-type one above.
Rows are cached on disk per (model file, corpus, context, chunks, format, activations, pruning,
grouping, code version) under $HARMONY_REF_CACHE/lm-sensitivity/ (HARMONY_REF_NO_LM_CACHE=1: off).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from harmony_ref._io import write_text_atomic
from harmony_ref.eval.lm import DEFAULT_CONTEXT, LAYER_TYPES, evaluate_lm, unscored_tokens
from harmony_ref.eval.lm_accuracy import Corpus, model_sha256
from harmony_ref.eval.lm_cache import ReferenceCache, cache_root, code_version
from harmony_ref.eval.plan import PLANNER_FORMATS, PLANNER_STEP_BYTES, choose_formats
from harmony_ref.quant.compress import (
    GRANULARITIES,
    METHODS,
    PRUNE_SCORES,
    ActivationSpec,
    PruneSpec,
)
from harmony_ref.quant.policy import (
    INT8,
    Policy,
    WeightFormat,
    int4_format_for_rows,
    parse_format,
    policy_from_dict,
)
from harmony_ref.units import MB

GROUPINGS = ("type", "block")
CALIBRATION = "calibration"  # the corpus part sensitivity and planning score
W8A8 = "w8a8"  # sensitivity format prefix: int8 weights + static int8 activations
PRUNE_KINDS = ("ffn", "heads")
ATTENTION_TYPES = ("q_proj", "k_proj", "v_proj", "o_proj")
FFN_TYPES = ("gate_proj", "up_proj", "down_proj")
# Modules the cached rows' numbers come from beyond lm_cache.CODE_MODULES
ROW_CODE_MODULES = (
    "model/prune.py",
    "runtime/calibration.py",
    "quant/compress.py",
    "quant/activations.py",
    "kernels/matmul_w8a8.py",
    "eval/lm_plan.py",
    "quant/gptq.py",
    "quant/awq.py",
    "runtime/sequential.py",
)


def parse_variant(text: str, where: str = "--format") -> tuple[WeightFormat, ActivationSpec | None]:
    """A weight format, or w8a8[-<granularity>]: (int8, its ActivationSpec with the defaults)."""
    t = str(text).strip().lower()
    if t == W8A8 or t.startswith(W8A8 + "-"):
        g = t[len(W8A8) + 1 :] or "per-channel"
        if g not in GRANULARITIES:
            raise ValueError(
                f"{where}: unknown W8A8 variant {text!r}; expected w8a8 or "
                + ", ".join(f"w8a8-{x}" for x in GRANULARITIES)
            )
        return INT8, ActivationSpec(granularity=g)
    return parse_format(text, where), None


def variant_name(fmt: WeightFormat, act: ActivationSpec | None) -> str:
    return fmt.name if act is None else f"{W8A8}-{act.granularity}"


def parse_prune(text: str, where: str = "--prune") -> dict[str, float]:
    """'ffn=0.1' / 'heads=0.25' / 'ffn=0.1,heads=0.25' -> {kind: ratio}, ratios in (0, 1)."""
    out = {}
    for part in str(text).split(","):
        kind, eq, value = part.strip().partition("=")
        kind = kind.strip()
        try:
            ratio = float(value) if eq else None
        except ValueError:
            ratio = None
        if kind not in PRUNE_KINDS or ratio is None:
            raise ValueError(
                f"{where} {text!r}: expected ffn=<ratio> and/or heads=<ratio>, "
                f"comma-separated (e.g. ffn=0.1)"
            )
        if not 0 < ratio < 1 or kind in out:
            raise ValueError(f"{where} {text!r}: {kind} ratio must be in (0, 1), once")
        out[kind] = ratio
    return out


def _rows_code_version() -> str:
    h = hashlib.sha256(code_version().encode())
    root = resources.files("harmony_ref")
    for rel in ROW_CODE_MODULES:
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return h.hexdigest()[:16]


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
    shape = {
        "q_proj": (q, d),
        "k_proj": (kv, d),
        "v_proj": (kv, d),
        "o_proj": (d, q),
        "gate_proj": (f, d),
        "up_proj": (f, d),
        "down_proj": (d, f),
    }
    if by == "block":
        return list(shape.values())
    if group == "lm_head":
        return [(config.vocab_size, d)]
    return [shape[group]] * config.n_layers


def fits(fmt, shapes) -> bool:
    """Whether a policy may give `fmt` to these (N, K) rows: an INT4 group no longer than the
    longest row (quant/policy.py check_applies refuses a plan that does otherwise)."""
    if fmt.block_weights:  # GGUF's blocks along K (32; the K-quants' 256)
        return all(k % fmt.block_weights == 0 for _, k in shapes)
    return fmt.kind != "int4" or fmt.group_size <= max(k for _, k in shapes)


def stored_bytes(fmt, shapes) -> int:
    """Bytes of the shapes in `fmt` as the runtime stores them (INT4 groups narrowed to K)."""
    return sum(
        (int4_format_for_rows(fmt, k) if fmt.kind == "int4" else fmt).nbytes(n, k)
        for n, k in shapes
    )


def pruned_shapes(
    config, ffn: float = 0.0, heads: float = 0.0, score: str = "l1"
) -> dict[str, list[tuple[int, int]]]:
    """Type -> (N, K) of every Linear of that type with every block pruned at (ffn, heads):
    model/prune.py's kept counts (pruned_spec, the shapes the device model costs)."""
    from harmony_ref.model.prune import decoder_spec, pruned_spec

    sp = pruned_spec(decoder_spec(config), PruneSpec(ffn=ffn, heads=heads, score=score))
    d, q, kv, f = (
        config.dim,
        sp.n_heads * config.head_dim,
        sp.n_kv_heads * config.head_dim,
        sp.intermediate,
    )
    shape = {
        "q_proj": (q, d),
        "k_proj": (kv, d),
        "v_proj": (kv, d),
        "o_proj": (d, q),
        "gate_proj": (f, d),
        "up_proj": (f, d),
        "down_proj": (d, f),
    }
    out = {t: [s] * config.n_layers for t, s in shape.items()}
    out["lm_head"] = [(config.vocab_size, d)]
    return out


def _rows_cache_path(
    model: str, path, corpus: Corpus, context: int, chunks, key: dict, by: str, stem: str
):
    root = cache_root()
    if root is None:
        return None
    digest = hashlib.sha256(
        "|".join(
            [
                model_sha256(model, path),
                corpus.sha256,
                str(context),
                str(chunks),
                json.dumps(key, sort_keys=True),
                by,
                _rows_code_version(),
            ]
        ).encode()
    )
    return root.parent / "lm-sensitivity" / f"{stem}-{by}-{digest.hexdigest()[:32]}.json"


@dataclass(frozen=True)
class _Group:
    name: str
    pattern: str
    policy: dict = field(hash=False)  # the policy table (default fp32)
    shapes: list = field(hash=False)  # (N, K) of the Linears it changes
    pruned_shapes: list | None = field(default=None, hash=False)


def _groups(
    config, by: str, fmt: WeightFormat, act, prune: dict | None, score: str, method: str = "rtn"
):
    """The rows' groups with the policy each is measured under (see the module doc)."""
    if not prune:
        out = []
        for group, pattern in group_patterns(config, by):
            pol = {"default": "fp32", "layers": {pattern: fmt.name}}
            if method != "rtn":
                pol["quantize"] = {"method": method}
            if act is not None:
                pol["activations"] = {"granularity": act.granularity}
            out.append(_Group(group, pattern, pol, group_shapes(config, group, by)))
        return out
    extra = {} if score == "l1" else {"score": score}
    full = pruned_shapes(config)
    if by == "type":
        out = []
        for kind, ratio in prune.items():
            cut = pruned_shapes(config, **{kind: ratio}, score=score)
            types = FFN_TYPES if kind == "ffn" else ATTENTION_TYPES
            out.append(
                _Group(
                    kind,
                    f"{kind}={ratio:g} in every block",
                    {"default": "fp32", "prune": {kind: ratio, **extra}},
                    [s for t in types for s in full[t]],
                    [s for t in types for s in cut[t]],
                )
            )
        return out
    if by != "block":
        raise ValueError(f"--by must be one of {', '.join(GROUPINGS)}, got {by!r}")
    cut = pruned_shapes(config, **prune, score=score)
    per_block = lambda shapes: [shapes[t][0] for t in LAYER_TYPES if t != "lm_head"]  # noqa
    return [
        _Group(
            f"block {i}",
            f"model.layers.{i}.*",
            {"default": "fp32", "prune": {"blocks": {str(i): dict(prune)}, **extra}},
            per_block(full),
            per_block(cut),
        )
        for i in range(config.n_layers)
    ]


def lm_sensitivity(
    model: str = "smollm2-135m",
    fmt: str = "int4-g32",
    by: str = "type",
    context: int = DEFAULT_CONTEXT,
    chunks: int | None = None,
    progress=None,
    loaded=None,
    corpus: Corpus | None = None,
    prune: dict | None = None,
    prune_score: str = "l1",
    method: str = "rtn",
) -> list[dict]:
    """One row per group (see the module doc), in group order, scored on the calibration part.
    Keys: group, pattern, format, kld_mean, kld_p99, ppl_ratio, top1_agreement_pct, bytes,
    bytes_fp32, scored_tokens, corpus, plus activations (W8A8 rows) / prune (pruning rows).
    `progress(done, total)` is called after every chunk."""
    from harmony_ref.runtime.loader import load_decoder_shared, resolve_model_path

    f, act = parse_variant(fmt, "--format")
    if prune_score not in PRUNE_SCORES:
        raise ValueError(
            f"--prune-score must be one of {', '.join(PRUNE_SCORES)}, got {prune_score!r}"
        )
    if prune and (act is not None or f.kind != "fp32"):
        raise ValueError("--prune measures pruning alone, FP32 weights: drop --format")
    path = resolve_model_path(model)
    corpus = corpus or Corpus.shipped(CALIBRATION)
    weights, tok = loaded or load_decoder_shared(model)
    if method not in METHODS:
        raise ValueError(f"--method must be one of {', '.join(METHODS)}, got {method!r}")
    if method != "rtn" and (prune or act is not None or f.kind not in ("int4", "int8")):
        raise ValueError(
            f"--method {method} fits int4 / int8 weights: not with --prune, W8A8 or {f.name}"
        )
    groups = _groups(weights.config, by, f, act, prune, prune_score, method)
    key = {
        "format": f.name,
        "activations": None if act is None else act.to_dict(),
        **({"method": method} if method != "rtn" else {}),
        "prune": prune or None,
        "prune_score": prune_score if prune else None,
    }
    stem = (
        "prune-" + "-".join(f"{k}{v:g}" for k, v in prune.items()) + f"-{prune_score}"
        if prune
        else variant_name(f, act) + ("" if method == "rtn" else f"-{method}")
    )
    cache_path = _rows_cache_path(model, path, corpus, context, chunks, key, by, stem)
    if cache_path is not None and cache_path.is_file():
        try:
            rows = json.loads(cache_path.read_text())["rows"]
            if [r["group"] for r in rows] == [g.name for g in groups]:
                return rows
        except (ValueError, KeyError, TypeError):
            pass  # damaged: measured again and overwritten
    ids = tok.encode(corpus.text)
    ref_cache = ReferenceCache.for_run(
        model_sha256(model, path), corpus.sha256, context, tok.add_bos
    )
    n_chunks = min(chunks or len(ids) // context, len(ids) // context)
    # W8A8 scales and activation scores calibrate on the tokens these rows never score
    calibration = unscored_tokens(ids, context, n_chunks)
    fp32 = parse_format("fp32")
    rows = []
    for gi, g in enumerate(groups):
        policy = policy_from_dict(
            {"name": f"{g.name}@{stem}", **g.policy}, f"<{g.name} alone in {stem}>"
        )
        step = (
            (lambda done, total, gi=gi: progress(gi * n_chunks + done, len(groups) * n_chunks))
            if progress
            else None
        )
        r = evaluate_lm(
            weights,
            ids,
            context,
            [(policy, "fp16")],
            add_bos=tok.add_bos,
            progress=step,
            max_chunks=chunks,
            reference_cache=ref_cache,
            calibration_tokens=calibration,
        )
        s = r["results"][policy.name]
        row = {
            "group": g.name,
            "pattern": g.pattern,
            "format": variant_name(f, act) if not prune else "fp32",
            "kld_mean": s["kld_mean"],
            "kld_p99": s["kld_p99"],
            "ppl_ratio": s["ppl_ratio"],
            "top1_agreement_pct": s["top1_agreement_pct"],
            "bytes": stored_bytes(f, g.pruned_shapes or g.shapes),
            "bytes_fp32": stored_bytes(fp32, g.shapes),
            "scored_tokens": s["scored_tokens"],
            "corpus": corpus.label,
        }
        if act is not None:
            row["activations"] = policy.activations.to_dict()
        if method != "rtn":
            row["method"] = method
            row["quantize"] = policy.quantize.to_dict()
        if prune:
            row["prune"] = policy.prune.to_dict()
        rows.append(row)
    if cache_path is not None:
        write_text_atomic(cache_path, json.dumps({**key, "by": by, "rows": rows}))
    return rows


@dataclass(frozen=True)
class LMPlan:
    policy: Policy
    budget_bytes: int
    linear_bytes: int
    predicted_kld: float  # sum of the chosen types' KLD measured alone (calibration part)
    choices: dict[str, str]  # type -> format
    calibration_scored_tokens: int
    prune: dict[str, float] | None = None  # chosen {"ffn": r, "heads": r} (pruning choices)
    activations: ActivationSpec | None = None  # W8A8 planned: the policy's [activations]
    predicted_parts: dict[str, float] | None = None  # pruning choices: group -> its KLD share
    methods: dict[str, str] | None = None  # type -> fitting method, when methods were choices


def _ratios(values, where: str) -> tuple[float, ...]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            raise ValueError(f"{where}: ratio {v!r} must be a number in [0, 1)")
        out.append(float(v))
    if not out:
        raise ValueError(f"{where}: give at least one ratio (0 = no pruning)")
    return tuple(sorted(set(out)))


def lm_plan(
    model: str = "smollm2-135m",
    budget_mb: float = 40.0,
    formats: tuple[str, ...] = PLANNER_FORMATS,
    context: int = DEFAULT_CONTEXT,
    chunks: int | None = None,
    progress=None,
    loaded=None,
    prune_ffn=(0.0,),
    prune_heads=(0.0,),
    prune_score: str = "l1",
    activations: str | None = None,
    methods: tuple[str, ...] = ("rtn",),
) -> LMPlan:
    """Per-type formats (and, given ratios above 0, uniform FFN / head pruning ratios)
    minimising the summed KLD (calibration part) within `budget_mb` MB of Linear weights; with
    `activations` (a granularity) the int8 option is W8A8. An impossible budget or a bad
    option is refused before anything is measured."""
    from harmony_ref.runtime.loader import checkpoint_config

    if not (math.isfinite(budget_mb) and budget_mb > 0):
        raise ValueError(f"--budget-mb must be a finite number > 0, got {budget_mb!r}")
    ffn_ratios = _ratios(prune_ffn, "--prune-ffn")
    head_ratios = _ratios(prune_heads, "--prune-heads")
    if prune_score not in PRUNE_SCORES:
        raise ValueError(
            f"--prune-score must be one of {', '.join(PRUNE_SCORES)}, got {prune_score!r}"
        )
    act = None
    if activations is not None:
        if activations not in GRANULARITIES:
            raise ValueError(
                f"--activations must be one of {', '.join(GRANULARITIES)}, got {activations!r}"
            )
        act = ActivationSpec(granularity=activations)
    fmts = [parse_format(f) for f in formats]
    methods = tuple(dict.fromkeys(methods))
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise ValueError(f"--methods {','.join(methods)}: each must be one of {', '.join(METHODS)}")
    if methods != ("rtn",) and act is not None:
        raise ValueError("--methods with --activations: GPTQ / AWQ are weight-only fits here")
    config = checkpoint_config(model)
    for t in LAYER_TYPES:
        if not any(fits(f, group_shapes(config, t, "type")) for f in fmts):
            raise ValueError(
                f"--formats {','.join(formats)}: none fits {t} of {model} (every "
                "INT4 group is longer than its rows)"
            )
    if ffn_ratios != (0.0,) or head_ratios != (0.0,):
        return _plan_grouped(
            model,
            budget_mb,
            fmts,
            context,
            chunks,
            progress,
            loaded,
            config,
            ffn_ratios,
            head_ratios,
            prune_score,
            act,
            methods,
        )
    types = [g for g, _ in group_patterns(config, "type")]
    sizes = [[stored_bytes(f, group_shapes(config, t, "type")) for f in fmts] for t in types]
    budget = int(budget_mb * MB)
    smallest = sum(
        min(sz for f, sz in zip(fmts, s) if fits(f, group_shapes(config, t, "type")))
        for t, s in zip(types, sizes)
    )
    if smallest > budget:
        raise ValueError(
            f"--budget-mb {budget_mb:g} is below the smallest possible Linear "
            f"weights of {model} ({smallest / MB:.2f} MB, every type in its "
            "smallest format)"
        )
    tables = _format_tables(model, fmts, act, context, chunks, progress, loaded, methods=methods)
    cost = np.array(
        [
            [-(-sizes[ti][fi] // PLANNER_STEP_BYTES) for fi in range(len(fmts))]
            for ti in range(len(types))
        ]
    )
    loss = np.array(
        [
            [
                max(tables[fi][ti]["kld_mean"], 0.0)
                if fits(fmts[fi], group_shapes(config, types[ti], "type"))
                else np.inf
                for fi in range(len(fmts))
            ]
            for ti in range(len(types))
        ]
    )
    picks = choose_formats(cost, loss, budget // PLANNER_STEP_BYTES)
    choices = {t: fmts[fi].name for t, fi in zip(types, picks)}
    chosen = _methods(tables, types, picks, methods)
    policy = _plan_policy(model, budget_mb, config, choices, None, prune_score, act, chosen)
    return LMPlan(
        policy,
        budget,
        sum(sizes[ti][fi] for ti, fi in enumerate(picks)),
        float(sum(loss[ti, fi] for ti, fi in enumerate(picks))),
        choices,
        tables[0][0]["scored_tokens"],
        activations=act,
        methods=chosen,
    )


def _methods(tables, types, picks, methods) -> dict[str, str] | None:
    """type -> the method of its chosen format's best row (None when only rtn was offered)."""
    if methods == ("rtn",):
        return None
    return {t: tables[fi][ti].get("method", "rtn") for ti, (t, fi) in enumerate(zip(types, picks))}


def _format_tables(
    model, fmts, act, context, chunks, progress, loaded, extra_steps: int = 0, methods=("rtn",)
):
    """Per format: the by-type sensitivity rows (int8 measured as W8A8 when `act`); with several
    methods, each type's row is the method with the lowest KLD (its "method" key says which:
    the bytes are the same, so the knapsack's choice among (format, method) pairs is this)."""
    tables = []
    runs = [(f, m) for f in fmts for m in (methods if f.kind in ("int4", "int8") else ("rtn",))]
    total = len(runs) + extra_steps
    by_fmt: dict = {}
    for ri, (f, m) in enumerate(runs):
        step = (lambda d, t, ri=ri: progress(ri * t + d, total * t)) if progress else None
        name = variant_name(f, act) if f.kind == "int8" else f.name
        rows = lm_sensitivity(model, name, "type", context, chunks, step, loaded, method=m)
        rows = [dict(r, method=m) for r in rows]
        best = by_fmt.get(f)
        by_fmt[f] = (
            rows
            if best is None
            else [r if r["kld_mean"] < b["kld_mean"] else b for r, b in zip(rows, best)]
        )
    for f in fmts:
        tables.append(by_fmt[f])
    return tables


def _plan_policy(model, budget_mb, config, choices, prune, score, act, methods=None) -> Policy:
    patterns = dict(group_patterns(config, "type"))
    what = (
        "per-type formats"
        + (" and pruning ratios" if prune else "")
        + (f" (W8A8 {act.granularity})" if act else "")
    )
    data = {
        "name": f"plan-{model.replace('/', '_')}-{budget_mb:g}mb",
        "default": "fp32",
        "description": (
            f"harmony-ref plan --model {model} --budget-mb {budget_mb:g}: "
            f"{what} minimising the summed KLD on the calibration corpus"
        ),
        "layers": {patterns[t]: f for t, f in choices.items()},
    }
    if prune:
        data["prune"] = {**prune, **({} if score == "l1" else {"score": score})}
    if act is not None:
        data["activations"] = {"granularity": act.granularity}
    fitted = {
        patterns[t]: m
        for t, m in (methods or {}).items()
        if m != "rtn" and parse_format(choices[t]).kind in ("int4", "int8")
    }
    if fitted:
        data["quantize"] = {"method": "rtn", "methods": fitted}
        data["description"] += "; (format, method) pairs"
    return policy_from_dict(data, "<plan>")


def _plan_grouped(
    model,
    budget_mb,
    fmts,
    context,
    chunks,
    progress,
    loaded,
    config,
    ffn_ratios,
    head_ratios,
    score,
    act,
    methods=("rtn",),
) -> LMPlan:
    """The grouped knapsack with pruning choices (see the module doc)."""
    budget = int(budget_mb * MB)
    shapes = {
        (k, r): pruned_shapes(config, **{k: r}, score=score)
        for k, ratios in (("ffn", ffn_ratios), ("heads", head_ratios))
        for r in ratios
    }
    items = [
        ("ffn", ffn_ratios, FFN_TYPES),
        ("heads", head_ratios, ATTENTION_TYPES),
        ("lm_head", (0.0,), ("lm_head",)),
    ]
    options = []  # per item: [(ratio, (format index per type), bytes)]
    for kind, ratios, types in items:
        opts = []
        for r in ratios:
            sh = shapes[(kind, r)] if kind != "lm_head" else shapes[("ffn", ffn_ratios[0])]
            for combo in itertools.product(range(len(fmts)), repeat=len(types)):
                if all(fits(fmts[fi], sh[t]) for t, fi in zip(types, combo)):
                    opts.append(
                        (
                            r,
                            combo,
                            sum(stored_bytes(fmts[fi], sh[t]) for t, fi in zip(types, combo)),
                        )
                    )
        options.append(opts)
    smallest = sum(min(o[2] for o in opts) for opts in options)
    if smallest > budget:
        raise ValueError(
            f"--budget-mb {budget_mb:g} is below the smallest possible Linear "
            f"weights of {model} ({smallest / MB:.2f} MB, every type in its "
            "smallest format at the largest pruning ratios)"
        )
    prune_rows = [
        (k, r)
        for k, ratios in (("ffn", ffn_ratios), ("heads", head_ratios))
        for r in ratios
        if r > 0
    ]
    tables = _format_tables(
        model,
        fmts,
        act,
        context,
        chunks,
        progress,
        loaded,
        extra_steps=len(prune_rows),
        methods=methods,
    )
    type_index = {row["group"]: i for i, row in enumerate(tables[0])}
    fmt_kld = {
        (t, fi): max(tables[fi][type_index[t]]["kld_mean"], 0.0)
        for t in LAYER_TYPES
        for fi in range(len(fmts))
    }
    prune_kld = {("ffn", 0.0): 0.0, ("heads", 0.0): 0.0}
    for pi, (kind, r) in enumerate(prune_rows):
        j = len(fmts) + pi
        total = len(fmts) + len(prune_rows)
        step = (lambda d, t, j=j: progress(j * t + d, total * t)) if progress else None
        row = lm_sensitivity(
            model, "fp32", "type", context, chunks, step, loaded, prune={kind: r}, prune_score=score
        )[0]
        prune_kld[(kind, r)] = max(row["kld_mean"], 0.0)
    width = max(len(o) for o in options)
    cost = np.full((len(items), width), np.iinfo(np.int64).max // 4, dtype=np.int64)
    loss = np.full((len(items), width), np.inf)
    for ii, ((kind, _, types), opts) in enumerate(zip(items, options)):
        for oi, (r, combo, nbytes) in enumerate(opts):
            cost[ii, oi] = -(-nbytes // PLANNER_STEP_BYTES)
            loss[ii, oi] = prune_kld.get((kind, r), 0.0) + sum(
                fmt_kld[(t, fi)] for t, fi in zip(types, combo)
            )
    cap = budget // PLANNER_STEP_BYTES
    cost = np.minimum(cost, cap + 1)  # padding options never fit
    picks = choose_formats(cost, loss, cap)
    choices, prune, parts, linear = {}, {}, {}, 0
    for ii, ((kind, _, types), opts) in enumerate(zip(items, options)):
        r, combo, nbytes = opts[picks[ii]]
        choices.update({t: fmts[fi].name for t, fi in zip(types, combo)})
        if kind != "lm_head" and r > 0:
            prune[kind] = r
        parts[kind if kind != "heads" else "attention"] = float(loss[ii, picks[ii]])
        linear += nbytes
    choices = {t: choices[t] for t in LAYER_TYPES}
    fidx = {f.name: fi for fi, f in enumerate(fmts)}
    chosen = (
        None
        if methods == ("rtn",)
        else {t: tables[fidx[choices[t]]][type_index[t]].get("method", "rtn") for t in LAYER_TYPES}
    )
    policy = _plan_policy(model, budget_mb, config, choices, prune, score, act, chosen)
    return LMPlan(
        policy,
        budget,
        linear,
        float(sum(parts.values())),
        choices,
        tables[0][0]["scored_tokens"],
        prune=prune,
        activations=act,
        predicted_parts=parts,
        methods=chosen,
    )


__all__ = [
    "GROUPINGS",
    "LMPlan",
    "group_patterns",
    "lm_plan",
    "lm_sensitivity",
    "parse_prune",
    "parse_variant",
    "pruned_shapes",
]
