"""The weight-budget planner on a decoder: per-type formats (and pruning ratios) minimising the
summed KL divergence to the FP32 reference within a budget, from the sensitivity rows of
eval/lm_sensitivity.py.

    plan = lm_plan("smollm2-135m", budget_mb=40)                    # a Policy within 40 MB
    plan = lm_plan("smollm2-135m", 60, prune_ffn=(0, 0.1, 0.25), prune_heads=(0, 0.25))

Held out means held out: planning scores the shipped corpus's `calibration` part only (through
the sensitivity rows); the planned policy is then scored on the `heldout` part, which planning
never saw.

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
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from harmony_ref.eval.lm import DEFAULT_CONTEXT, LAYER_TYPES
from harmony_ref.eval.lm_sensitivity import (
    ATTENTION_TYPES,
    FFN_TYPES,
    fits,
    group_patterns,
    group_shapes,
    lm_sensitivity,
    pruned_shapes,
    stored_bytes,
    variant_name,
)
from harmony_ref.eval.plan import PLANNER_FORMATS, PLANNER_STEP_BYTES, choose_formats
from harmony_ref.quant.compress import GRANULARITIES, METHODS, PRUNE_SCORES, ActivationSpec
from harmony_ref.quant.policy import Policy, parse_format, policy_from_dict
from harmony_ref.units import MB


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
                max(tables[fi][types[ti]]["kld_mean"], 0.0)
                if fits(fmts[fi], group_shapes(config, types[ti], "type"))  # then it has a row
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
        _scored_tokens(tables),
        activations=act,
        methods=chosen,
    )


def _methods(tables, types, picks, methods) -> dict[str, str] | None:
    """type -> the method of its chosen format's best row (None when only rtn was offered)."""
    if methods == ("rtn",):
        return None
    return {t: tables[fi][t].get("method", "rtn") for t, fi in zip(types, picks)}


def _scored_tokens(tables) -> int:
    """The tokens every row scored (one corpus part, one context: the same for all)."""
    return next(row for table in tables for row in table.values())["scored_tokens"]


def _format_tables(
    model, fmts, act, context, chunks, progress, loaded, extra_steps: int = 0, methods=("rtn",)
):
    """Per format: its by-type sensitivity rows, type -> row (int8 measured as W8A8 when `act`;
    no row for a type the format cannot store); with several methods, each type's row is the
    method with the lowest KLD (its "method" key says which: the bytes are the same, so the
    knapsack's choice among (format, method) pairs is this)."""
    tables = []
    runs = [(f, m) for f in fmts for m in (methods if f.facts.fitted else ("rtn",))]
    total = len(runs) + extra_steps
    by_fmt: dict = {}
    for ri, (f, m) in enumerate(runs):
        step = (lambda d, t, ri=ri: progress(ri * t + d, total * t)) if progress else None
        name = variant_name(f, act) if f.facts.w8a8 else f.name
        rows = lm_sensitivity(model, name, "type", context, chunks, step, loaded, method=m)
        rows = [dict(r, method=m) for r in rows]
        best = by_fmt.get(f)
        by_fmt[f] = (
            rows
            if best is None
            else [r if r["kld_mean"] < b["kld_mean"] else b for r, b in zip(rows, best)]
        )
    for f in fmts:
        tables.append({r["group"]: r for r in by_fmt[f]})
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
        if m != "rtn" and parse_format(choices[t]).facts.fitted
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
    fmt_kld = {
        (t, fi): max(tables[fi][t]["kld_mean"], 0.0) if t in tables[fi] else np.inf
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
        else {t: tables[fidx[choices[t]]][t].get("method", "rtn") for t in LAYER_TYPES}
    )
    policy = _plan_policy(model, budget_mb, config, choices, prune, score, act, chosen)
    return LMPlan(
        policy,
        budget,
        linear,
        float(sum(parts.values())),
        choices,
        _scored_tokens(tables),
        prune=prune,
        activations=act,
        predicted_parts=parts,
        methods=chosen,
    )


__all__ = ["LMPlan", "lm_plan"]
