"""Fit a runtime profile's numbers to measured points, and write the profile as TOML.

    rt, report = fit_on_points(load_runtime("llama.cpp-cpu"), points, ("matmul", "memory"))
    text = runtime_toml(rt, notes)        # loads back through device/runtime.py's schema

`fit_on_points` moves the named parameters (PARAMS: efficiencies in (0, 1], overheads and the
workspace >= 0) so that the simulated predictions of the `fit` points (calibrate/points.py)
match their measurements: least squares on log(predicted / measured) (relative error, a slow
figure counts as much as a fast one; scipy.optimize.least_squares within the bounds). Each
prediction is the one the fidelity command makes: the SoC and the trial runtime merged
(device/runtime.py apply_runtime) and priced by device/cost.py. A parameter the fit points do
not move (no decode point for a memory efficiency) keeps its prior value and is reported as not
fitted. The roofline's max() makes basins (an op memory- or compute-bound), so the fit starts
from the prior and from a tenth of it in every parameter and keeps the best (a cost added after
the max(), NO_BASIN, from its prior alone: it makes no basin). Points with split
"score" are refused: held out means held out.

`fit_soc_efficiencies` then gives a SoC its own matmul efficiency (a [[soc_efficiency]] entry of
the runtime profile) where the points span several SoCs and that SoC has a prompt figure of its
own; `fit_on_points` itself moves only the shared numbers.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import math

import numpy as np

from harmony_ref.device.runtime import RuntimeCalibration, RuntimeProfile, SocEfficiency

# parameter -> (section of RuntimeProfile or "" for a top-level field, field, lower, upper)
PARAMS = {
    "matmul": ("efficiency", "matmul", 1e-4, 1.0),
    "memory": ("efficiency", "memory", 1e-4, 1.0),
    "cache": ("efficiency", "cache", 1e-4, 1.0),
    "attention": ("efficiency", "attention", 1e-4, 1.0),
    "gemv": ("efficiency", "gemv", 1e-4, 1.0),
    "vector": ("efficiency", "vector", 1e-4, 1.0),
    "int4": ("efficiency", "int4", 1e-4, 1.0),
    "int8": ("efficiency", "int8", 1e-4, 1.0),
    "fp16": ("efficiency", "fp16", 1e-4, 1.0),
    "gemv_int4": ("efficiency", "gemv_int4", 1e-4, 1.0),
    "gemv_int8": ("efficiency", "gemv_int8", 1e-4, 1.0),
    "gemv_fp16": ("efficiency", "gemv_fp16", 1e-4, 1.0),
    "attention_decode": ("efficiency", "attention_decode", 1e-4, 1.0),
    "launch_us": ("overhead", "launch_us", 0.0, 1e5),
    "forward_us": ("overhead", "forward_us", 0.0, 1e6),
    "workspace_mb": ("", "workspace_mb", 0.0, 1e6),
    "thread_share": ("", "thread_share", 0.0, 1.0),
    "gemv_thread_share": ("", "gemv_thread_share", 0.0, 1.0),
    "fp16_widen_ns": ("overhead", "fp16_widen_ns_per_weight", 0.0, 100.0),
    "graph_us": ("overhead", "graph_us", 0.0, 1e6),
    "prompt_sync_us": ("overhead", "prompt_sync_us_per_thread", 0.0, 1e4),
    "attention_ns": ("overhead", "attention_ns_per_position", 0.0, 1e5),
}
# costs added to an op's time after the roofline's max(), not inside it: no basin, so the fit
# starts them from their prior alone (each parameter in the corners doubles the fit's starts:
# 2^7 starts of 25 ms predictions took over 15 minutes on calibrate --backend executorch's rows)
NO_BASIN = ("prompt_sync_us", "attention_ns")
# [overhead] fields a profile leaves out when 0 (every shipped profile does)
UNSET_ZERO = ("prompt_sync_us_per_thread", "attention_ns_per_position")
_SENSITIVITY = 0.01  # a probe step moving no prediction by 1%: the points do not pin the parameter
PROBE = {
    "launch_us": 1.0,
    "forward_us": 100.0,
    "workspace_mb": 10.0,
    "fp16_widen_ns": 0.5,
    "graph_us": 100.0,
    "prompt_sync_us": 10.0,
    "attention_ns": 100.0,
    "thread_share": 0.5,
    "gemv_thread_share": 0.5,
}  # probe sizes from 0


def get_param(rt: RuntimeProfile, name: str) -> float:
    sec, key, _, _ = PARAMS[name]
    v = getattr(getattr(rt, sec) if sec else rt, key)
    if name == "thread_share" and math.isnan(v):  # unset: the SoC's; a fit starts mid-range
        return PROBE[name]
    if name == "gemv_thread_share" and math.isnan(v):  # unset: thread_share's
        return get_param(rt, "thread_share")
    if isinstance(v, float) and math.isnan(v):  # an unset per-class efficiency: its chain's
        from harmony_ref.device.soc import FALLBACK

        chain = FALLBACK.get(name, ())
        v = next(
            (getattr(rt.efficiency, c) for c in chain if not math.isnan(getattr(rt.efficiency, c))),
            rt.efficiency.memory if name == "cache" else rt.efficiency.matmul,
        )
    return float(v)


def with_params(rt: RuntimeProfile, values: dict[str, float]) -> RuntimeProfile:
    eff, over, top = {}, {}, {}
    for name, v in values.items():
        sec, key, _, _ = PARAMS[name]
        {"efficiency": eff, "overhead": over, "": top}[sec][key] = float(v)
    out = dataclasses.replace(
        rt,
        efficiency=dataclasses.replace(rt.efficiency, **eff),
        overhead=dataclasses.replace(rt.overhead, **over),
        **top,
    )
    object.__setattr__(out, "source", rt.source)
    return out


@dataclasses.dataclass
class FitReport:
    fitted: tuple[str, ...]
    not_fitted: tuple[str, ...]
    rows: list[dict]  # per fit point: id, metric, measured, predicted, error_pct
    fit_mape_pct: float
    cost: float


def fit_on_points(
    rt: RuntimeProfile, points, params: tuple[str, ...], multistart: bool = True
) -> tuple[RuntimeProfile, FitReport]:
    """Fit `params` of `rt` on `points` (all split "fit"; see the module docstring).
    `multistart=False`: start from `rt`'s numbers only (a start that is already close)."""
    from scipy.optimize import least_squares

    held = [p.id for p in points if p.split != "fit"]
    if held:
        raise ValueError(
            f"fit of {rt.name}: point(s) {held} are held out (split 'score'): "
            "held-out points are never fitted on"
        )
    if not points:
        raise ValueError(f"fit of {rt.name}: no fit points")
    unknown = [p for p in params if p not in PARAMS]
    if unknown:
        raise ValueError(f"fit of {rt.name}: unknown parameter(s) {unknown}; known {list(PARAMS)}")
    measured = np.array([p.measured for p in points])
    x0 = np.array([get_param(rt, n) for n in params])

    def trial(x):
        return with_params(rt, dict(zip(params, x)))

    def residuals(x):
        r = trial(x)
        return np.log(np.array([p.predicted(r) for p in points]) / measured)

    lo = np.array([PARAMS[n][2] for n in params])
    hi = np.array([PARAMS[n][3] for n in params])
    first = np.clip(np.where(x0 > 0, x0, [PROBE.get(n, 1e-3) for n in params]), lo + 1e-12, hi)
    # A roofline's max() makes basins (an op memory- or compute-bound): start from the prior and
    # from a tenth of it in every parameter, keep the best
    best = None
    scales = [(1.0,) if n in NO_BASIN or not multistart else (1.0, 0.1) for n in params]
    for corner in itertools.product(*scales):
        start = np.clip(first * np.array(corner), lo + 1e-12, hi)
        sol = least_squares(
            residuals,
            start,
            bounds=(lo, hi),
            x_scale=np.maximum(start, 1e-4),
            xtol=1e-10,
            ftol=1e-10,
        )
        if best is None or sol.cost < best.cost - 1e-12:
            best = sol
    x = best.x
    # which parameters the points pin at the solution: a step up by a quarter (from 0: a typical
    # size) or down to a quarter moves some prediction by more than _SENSITIVITY
    base = residuals(x)
    moved = []
    for i, n in enumerate(params):
        for v in (min(hi[i], max(x[i] * 1.25, PROBE.get(n, 0.0))), max(lo[i], x[i] / 4)):
            y = x.copy()
            y[i] = v
            if v != x[i] and np.max(np.abs(residuals(y) - base)) > _SENSITIVITY:
                moved.append(i)
                break
    fitted = tuple(params[i] for i in moved)
    out = with_params(rt, {params[i]: x[i] for i in moved})  # unpinned ones keep their prior
    rows, mape = point_rows(out, points)
    pred = np.array([r["predicted"] for r in rows])
    return out, FitReport(
        fitted,
        tuple(n for n in params if n not in fitted),
        rows,
        mape,
        float(np.sum(np.log(pred / measured) ** 2)),
    )


# the metrics a matmul efficiency moves: a prompt's time or rate, or its time to first token
PROMPT_METRICS = ("prefill_ms", "prefill_tokens_per_s", "ttft_ms")


def with_soc_efficiency(rt: RuntimeProfile, entries) -> RuntimeProfile:
    """`rt` with `entries` (SocEfficiency) as its [[soc_efficiency]], its source kept."""
    out = dataclasses.replace(rt, soc_efficiency=tuple(entries))
    object.__setattr__(out, "source", rt.source)
    return out


def shared_only(rt: RuntimeProfile) -> RuntimeProfile:
    """`rt` without its [[soc_efficiency]] entries: every SoC at the shared efficiencies (what
    a fit of the shared numbers starts from, so that no old entry hides a SoC from it)."""
    return with_soc_efficiency(rt, ())


def fit_soc_efficiencies(rt: RuntimeProfile, points) -> tuple[RuntimeProfile, list[dict]]:
    """`rt` (its shared numbers fitted on all of `points`) with a matmul efficiency of their
    own for the SoCs that can pin one: when the points span more than one SoC, each SoC with a
    prompt figure (PROMPT_METRICS) gets the matmul that fits its own points alone, every other
    number held at the shared fit's. One SoC alone needs no entry (the shared fit is its own).
    Returns the runtime and one row per SoC entry (soc, shared, own matmul, fitted_on)."""
    from harmony_ref.device.soc import load_soc

    by_soc: dict[str, list] = {}
    for p in points:
        by_soc.setdefault(load_soc(p.profile).name, []).append(p)
    entries, rows = [], []
    if len(by_soc) > 1:
        for soc, pts in sorted(by_soc.items()):
            if not any(p.metric in PROMPT_METRICS for p in pts):
                continue
            own, report = fit_on_points(rt, pts, ("matmul",), multistart=False)
            if "matmul" not in report.fitted:
                continue
            matmul = _closest_to_shared(rt, pts, own.efficiency.matmul, report.cost)
            ids = tuple(p.id for p in pts)
            entries.append(SocEfficiency(soc, float(f"{matmul:.6g}"), ids))
            rows.append(
                {
                    "soc": soc,
                    "shared_matmul": rt.efficiency.matmul,
                    "own_matmul": matmul,
                    "fitted_on": list(ids),
                }
            )
    return with_soc_efficiency(rt, entries), rows


def _closest_to_shared(rt: RuntimeProfile, points, best: float, best_cost: float) -> float:
    """Of the matmul efficiencies that fit `points` as well as `best` does, the one closest to
    the shared one. A roofline is flat where every op is memory-bound: a SoC whose prompt
    figures only bound its efficiency from below (any value above some floor fits them alike)
    gets that floor, not wherever the solver stopped. Bisection on the segment shared..best."""
    shared = rt.efficiency.matmul

    def cost(v: float) -> float:
        r = with_params(rt, {"matmul": v})
        return float(sum(math.log(p.predicted(r) / p.measured) ** 2 for p in points))

    limit = best_cost * (1 + 1e-3) + 1e-12
    if cost(shared) <= limit:
        return shared
    near, far = shared, best  # cost(near) > limit >= cost(far)
    for _ in range(40):
        mid = 0.5 * (near + far)
        near, far = (mid, far) if cost(mid) > limit else (near, mid)
    return far


def point_rows(rt: RuntimeProfile, points) -> tuple[list[dict], float]:
    """Measured beside `rt`'s prediction for each point, and their MAPE."""
    rows = []
    for p in points:
        v = p.predicted(rt)
        rows.append(
            {
                "id": p.id,
                "metric": p.metric,
                "measured": float(p.measured),
                "predicted": float(v),
                "error_pct": float(100 * (v - p.measured) / p.measured),
            }
        )
    return rows, float(np.mean([abs(r["error_pct"]) for r in rows]))


def calibrated(
    rt: RuntimeProfile,
    method: str,
    fitted_on,
    scored_on,
    fit_mape_pct: float,
    held_out_mape_pct: float = math.nan,
) -> RuntimeProfile:
    cal = RuntimeCalibration(
        method,
        tuple(fitted_on),
        tuple(scored_on),
        float(fit_mape_pct),
        float(held_out_mape_pct),
        datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
    out = dataclasses.replace(rt, calibration=cal)
    object.__setattr__(out, "source", rt.source)
    return out


def with_held_out(rt: RuntimeProfile, held_out_mape_pct: float) -> RuntimeProfile:
    """`rt`'s calibration with its held-out error, scored after the fit."""
    c = rt.calibration
    return calibrated(rt, c.method, c.fitted_on, c.scored_on, c.fit_mape_pct, held_out_mape_pct)


RUNTIME_DIGITS = 6  # significant digits a written runtime profile keeps of a fitted number


def runtime_toml(
    rt: RuntimeProfile, comments: dict[str, str] | None = None, header: str = ""
) -> str:
    """TOML of `rt` (device/runtime.py's schema), a comment beside each field from `comments`
    (keys "field" or "section.field": where the number comes from)."""
    from harmony_ref.calibrate.write import toml_value

    comments = comments or {}

    def line(key, value, where):
        c = comments.get(where, "")
        return f"{key} = {toml_value(value, RUNTIME_DIGITS)}" + (f"  # {c}" if c else "")

    out = [f"# {h}" if h else "#" for h in header.splitlines()] if header else []
    for f in (
        "name",
        "description",
        "unit",
        *(["npu"] if rt.npu else []),
        "weight_only_compute",
        "threads",
        "thread_split",
        "thread_share",
        "gemv_thread_share",
        "workspace_mb",
        "kv_cache",
        "kv_context",
    ):
        if f == "kv_context" and rt.kv_cache != "static":
            continue
        if f in ("thread_share", "gemv_thread_share") and math.isnan(getattr(rt, f)):  # unset
            continue
        out.append(line(f, getattr(rt, f), f))
    for sec in ("efficiency", "overhead"):
        out += ["", f"[{sec}]"]
        obj = getattr(rt, sec)
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if isinstance(v, float) and math.isnan(v):
                continue
            if sec == "overhead" and f.name == "graph_us" and obj.graph != "compiled":
                continue
            if sec == "overhead" and f.name in UNSET_ZERO and not v:  # unset
                continue
            out.append(line(f.name, v, f"{sec}.{f.name}"))
    f16 = rt.float16
    out += ["", "[float16]"]
    out += [line(fmt, getattr(f16, fmt), f"float16.{fmt}") for fmt in ("fp16", "bf16")]
    for c in f16.core:
        out += ["[[float16.core]]", line("name", c.name, "")]
        out += [line(fmt, getattr(c, fmt), "") for fmt in ("fp16", "bf16") if getattr(c, fmt)]
    if rt.soc_efficiency:
        out += [
            "",
            "# SoCs whose own calibration figures pin a matmul efficiency of their own; every",
            "# other SoC takes [efficiency] matmul, the one pooled over all of them",
        ]
    for e in rt.soc_efficiency:
        out += ["[[soc_efficiency]]", line("soc", e.soc, "")]
        n = len(e.fitted_on)
        out.append(
            f"matmul = {toml_value(e.matmul, RUNTIME_DIGITS)}"
            + (f"  # fitted on this SoC's {n} point{'s' if n > 1 else ''} alone" if n else "")
        )
        out.append(line("fitted_on", list(e.fitted_on), ""))
    if rt.calibration is not None:
        c = rt.calibration
        out += [
            "",
            "# which measurements these numbers were fitted on, and which scored them",
            "[calibration]",
            line("method", c.method, ""),
            line("fitted_on", list(c.fitted_on), ""),
            line("scored_on", list(c.scored_on), ""),
        ]
        if not math.isnan(c.fit_mape_pct):
            out.append(line("fit_mape_pct", c.fit_mape_pct, ""))
        if not math.isnan(c.held_out_mape_pct):
            out.append(line("held_out_mape_pct", c.held_out_mape_pct, ""))
        out.append(line("fitted_at", c.fitted_at, ""))
    return "\n".join(out) + "\n"


def held_out_mape(rt: RuntimeProfile, points) -> float:
    """MAPE of `rt`'s predictions over the scored points (NaN when there are none)."""
    held = [p for p in points if p.split == "score"]
    if not held:
        return math.nan
    return float(np.mean([abs(p.predicted(rt) - p.measured) / p.measured for p in held]) * 100)
