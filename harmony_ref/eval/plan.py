"""The weight-budget planner: per-Linear formats minimising MiniLM's measured loss within a budget.

    plan = plan_policy(9.0)        # MB of Linear weights; plan.policy names every Linear

A multiple-choice knapsack. Each Linear l gets one format f of {fp16, int8, int4-g128, int4-g32},
costing bytes(l, f) (the real stored size, scales and zero points included) and loss(l, f) = its
measured cosine_loss alone (eval/sensitivity.py). Assuming losses add across layers (checked: the
planner reports the predicted sum beside the measured loss of the policy it picked), the total
loss is minimised under sum bytes <= budget by dynamic programming over the budget in 1 kB steps
(sizes rounded up, so the result always fits). This is exact for the additive model, unlike a
greedy by loss per byte, which can strand budget. The policy it returns names every Linear in a
[layers] table; the planner then measures it like any other policy.
The budget covers the Linear weights, the only tensors a policy formats; embeddings, LayerNorms
and biases stay FP32 and are reported separately.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harmony_ref.eval.embedding import EvalSet, load_pairs, model_or_default
from harmony_ref.eval.sensitivity import layer_losses
from harmony_ref.quant.policy import Policy, parse_format
from harmony_ref.units import MB

PLANNER_FORMATS = ("fp16", "int8", "int4-g128", "int4-g32")
PLANNER_STEP_BYTES = 1000


def choose_formats(cost: np.ndarray, loss: np.ndarray, cap: int) -> list[int]:
    """Multiple-choice knapsack: one option per row minimising the summed loss with the summed
    integer cost <= cap. cost, loss: (layers, options). Dynamic programming, O(layers x options
    x cap); raises ValueError if even the cheapest options exceed cap."""
    n_layers, n_opts = cost.shape
    if cost.min(axis=1).sum() > cap:
        raise ValueError(f"no choice fits: the cheapest costs {cost.min(axis=1).sum()} > {cap}")
    # A budget beyond every row's dearest usable option buys nothing more: the table need not be
    # wider than that (a budget of 10^12 MB would otherwise be a 10^15-entry table).
    usable = np.where(np.isfinite(loss) & (cost <= cap), cost, 0)
    cap = int(min(cap, usable.max(axis=1).sum()))
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


def plan_policy(
    budget_mb: float,
    model=None,
    evalset: EvalSet | None = None,
    formats: tuple[str, ...] = PLANNER_FORMATS,
    progress: bool = False,
    name: str | None = None,
) -> Plan:
    """The per-Linear formats minimising the summed measured cosine loss within `budget_mb` MB of
    Linear weights (multiple-choice knapsack by dynamic programming, see the module docstring)."""
    model = model_or_default(model)
    evalset = evalset or load_pairs()
    if not (math.isfinite(budget_mb) and budget_mb > 0):
        raise ValueError(f"budget_mb must be a finite number > 0, got {budget_mb!r}")
    budget = int(budget_mb * MB)
    names = model.linear_names()
    # Sizes are known before anything is measured: refuse an impossible budget up front, not
    # after minutes of sensitivity runs.
    shapes = [model.params[n + ".weight"].shape for n in names]
    smallest = sum(min(parse_format(f).nbytes(*shape) for f in formats) for shape in shapes)
    if smallest > budget:
        raise ValueError(
            f"budget {budget_mb} MB is below the smallest possible Linear weights "
            f"({smallest / MB:.3f} MB with every layer in its smallest format)"
        )
    tables = {
        f: {r["layer"]: r for r in layer_losses(f, model, evalset, progress)} for f in formats
    }
    # (layers, formats) cost in steps (rounded up) and loss
    cost = np.array(
        [[-(-tables[f][n]["bytes"] // PLANNER_STEP_BYTES) for f in formats] for n in names]
    )
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
        description=(
            f"harmony-ref plan --budget-mb {budget_mb:g}: per-Linear formats minimising "
            f"the summed measured cosine loss on {len(evalset.sentences)} sentences"
        ),
    )
    return Plan(policy, budget, total, predicted, choices)
