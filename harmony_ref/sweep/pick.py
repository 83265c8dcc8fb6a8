"""The answer a sweep is for: per phone and runtime, the best feasible (model, policy, KV dtype)
and why each other loses.

    answers = pick(read_points(store), profiles=["harmony-lowend"], budget_mb=3000,
                   max_accuracy_drop=2.0, min_decode_tps=10)
    answers[0].best, answers[0].frame          # the winner's row; every candidate with its verdict

Feasible means every constraint holds: peak memory within `budget_mb` (default: the phone's own
app budget, the `fits_memory` metric), accuracy loss within `max_kld` (the LM accuracy's mean KL
divergence, when the sweep measured it) or `max_accuracy_drop` (MiniLM recall@1 drop in points),
decode tokens/s at least `min_decode_tps`. A constraint on a metric the sweep did not measure is
bad input. Among the feasible points the best has the highest decode tokens/s (`objective`
"decode"), the least accuracy loss ("accuracy", ties to the faster) or the least peak memory
("memory"). The others lose either by the constraints they break (each named with its numbers)
or, feasible, by the objective; `pareto` marks points no other feasible point beats on both
decode tokens/s and accuracy loss.

One answer per phone, runtime and scenario (prompt/new/context tokens, batch, backend): a sweep
over two runtimes has two answers per phone, and every answer names its runtime, in its line
(the winner's) and in each loser's reason (`runtime` filters them: --runtime). A sweep written
before rows carried the runtime reads as each profile's own ("" = the profile's default). Measured metrics (a host part or backend) come from
the machine that ran the point; `pick` never ranks timings of different machines together: when
a metric it uses was measured on more than one, `machine` must choose one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

KLD_SUFFIX = "kld_mean"
DROP_METRIC = "accuracy_drop_pct"
DECODE = "decode_tokens_per_s"
MEMORY = "peak_memory_mb"
OBJECTIVES = ("decode", "accuracy", "memory")
SCENARIO_COLUMNS = ("prompt_tokens", "new_tokens", "context_tokens", "batch", "backend")
CANDIDATE_COLUMNS = ("model", "policy", "kv_dtype")


@dataclass
class Answer:
    profile: str
    runtime: str  # the runtime the phone ran ("" for a profile that names none)
    scenario: dict
    frame: object  # pandas: one row per candidate, verdict and why
    best: dict | None
    loss_metric: str | None
    constraints: dict = field(default_factory=dict)
    objective: str = "decode"

    def to_dict(self) -> dict:
        rows = [{k: _plain(v) for k, v in r.items()} for r in self.frame.to_dict("records")]
        return {
            "profile": self.profile,
            "runtime": self.runtime or None,
            "scenario": self.scenario,
            "objective": self.objective,
            "constraints": self.constraints,
            "loss_metric": self.loss_metric,
            "best": None if self.best is None else {k: _plain(v) for k, v in self.best.items()},
            "candidates": rows,
        }


def _plain(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):
        return v.item()
    return v


def loss_metric(df) -> str | None:
    """The accuracy loss column: the LM's mean KL divergence when present, else MiniLM's
    recall@1 drop, else None (the sweep ran no accuracy part)."""
    kld = [c for c in df.columns if c.endswith(KLD_SUFFIX) and df[c].notna().any()]
    if kld:
        return sorted(kld)[0]
    if DROP_METRIC in df.columns and df[DROP_METRIC].notna().any():
        return DROP_METRIC
    return None


def read_points(store):
    """The sweep's rows; a sweep that does not exist or has no ok point is a ValueError."""
    if not store.exists():
        raise ValueError(
            f"--sweep {store.name}: no sweep at {store.dir} "
            f"(run `harmony-ref sweep --name {store.name} ...` first)"
        )
    df = store.read()
    if "runtime" not in df.columns:  # a sweep written before rows carried it
        df["runtime"] = ""
    df["runtime"] = df["runtime"].fillna("")
    ok = df[df["status"] == "ok"]
    if ok.empty:
        raise ValueError(
            f"--sweep {store.name}: {store.points_path} has no successful point "
            f"({len(df)} rows, all failed)"
        )
    return ok.reset_index(drop=True)


def _need(df, column: str, flag: str) -> None:
    if column not in df.columns or df[column].isna().all():
        raise ValueError(
            f"{flag}: the sweep has no {column!r} metric (run its part: "
            f"{'accuracy' if column != DECODE else 'predicted'})"
        )


def check_machines(df, columns: list[str], machine: str | None):
    """Rows of one machine where a used metric was measured; a ValueError when it is ambiguous."""
    if machine is not None:
        if machine not in set(df["machine"]):
            raise ValueError(
                f"--machine {machine!r}: not in the sweep; its machines are "
                f"{sorted(set(df['machine']))}"
            )
        return df[df["machine"] == machine]
    measured = df["measured_metrics"].fillna("").str.split(",")
    uses = measured.apply(lambda names: any(c in names for c in columns))
    machines = sorted(set(df.loc[uses, "machine"]))
    if len(machines) > 1:
        raise ValueError(
            f"the metrics used ({', '.join(columns)}) were measured on "
            f"{len(machines)} machines {machines}: timings of different machines "
            "are not compared; choose one with --machine"
        )
    return df


def pick(
    df,
    profiles: list[str] | None = None,
    budget_mb: float | None = None,
    max_kld: float | None = None,
    max_accuracy_drop: float | None = None,
    min_decode_tps: float | None = None,
    objective: str = "decode",
    machine: str | None = None,
    models: list[str] | None = None,
    runtimes: list[str] | None = None,
) -> list[Answer]:
    if "runtime" not in df.columns:
        df = df.assign(runtime="")
    if runtimes:
        known_runtimes = sorted(set(df["runtime"]))
        for r in runtimes:
            if r not in known_runtimes:
                raise ValueError(
                    f"--runtime {r!r}: not in the sweep; its runtimes are {known_runtimes}"
                )
        df = df[df["runtime"].isin(runtimes)]
    if models:
        known_models = sorted(set(df["model"]))
        for m in models:
            if m not in known_models:
                raise ValueError(f"--models {m!r}: not in the sweep; its models are {known_models}")
        df = df[df["model"].isin(models)]
    if objective not in OBJECTIVES:
        raise ValueError(f"--objective {objective!r}: must be one of {list(OBJECTIVES)}")
    for flag, v in (
        ("--budget-mb", budget_mb),
        ("--max-kld", max_kld),
        ("--max-accuracy-drop", max_accuracy_drop),
        ("--min-decode-tps", min_decode_tps),
    ):
        if v is not None and not (math.isfinite(v) and v >= 0):
            raise ValueError(f"{flag} {v}: must be a finite number >= 0")
    known = sorted(set(df["profile"]))
    profiles = profiles or known
    for p in profiles:
        if p not in known:
            raise ValueError(f"--profile {p!r}: not in the sweep; its profiles are {known}")
    loss = loss_metric(df)
    kld = loss if loss and loss.endswith(KLD_SUFFIX) else None
    if max_kld is not None and kld is None:
        raise ValueError(
            f"--max-kld {max_kld}: the sweep has no KL divergence metric (*_"
            f"{KLD_SUFFIX}); its accuracy loss is "
            f"{loss or 'not measured'}: use --max-accuracy-drop"
        )
    if max_accuracy_drop is not None:
        _need(df, DROP_METRIC, "--max-accuracy-drop")
    if objective == "accuracy" and loss is None:
        raise ValueError("--objective accuracy: the sweep has no accuracy part")
    used = [c for c in (DECODE, MEMORY, loss) if c]
    if min_decode_tps is not None or objective == "decode":
        _need(df, DECODE, "--min-decode-tps" if min_decode_tps is not None else "--objective")
    df = check_machines(df, used, machine)
    constraints = {
        k: v
        for k, v in (
            ("budget_mb", budget_mb),
            ("max_kld", max_kld),
            ("max_accuracy_drop", max_accuracy_drop),
            ("min_decode_tps", min_decode_tps),
        )
        if v is not None
    }
    out = []
    for profile in profiles:
        sub = df[df["profile"] == profile]
        for (runtime, *scen), group in sub.groupby(["runtime", *SCENARIO_COLUMNS], sort=True):
            frame, best = _rank(
                group,
                loss,
                kld,
                budget_mb,
                max_kld,
                max_accuracy_drop,
                min_decode_tps,
                objective,
                runtime,
            )
            out.append(
                Answer(
                    profile,
                    runtime,
                    dict(zip(SCENARIO_COLUMNS, map(_plain, scen))),
                    frame,
                    best,
                    loss,
                    constraints,
                    objective,
                )
            )
    return out


def _col(row, name):
    v = row.get(name, math.nan)
    return math.nan if v is None else float(v)


def _reasons(row, loss, kld, budget_mb, max_kld, max_drop, min_tps) -> list[str]:
    out = []
    mem = _col(row, MEMORY)
    if budget_mb is not None:
        if not mem <= budget_mb:
            out.append(f"peak memory {mem:.0f} MB > budget {budget_mb:g} MB")
    elif _col(row, "fits_memory") == 0.0:
        out.append(
            f"peak memory {mem:.0f} MB > the phone's app budget {_col(row, 'app_budget_mb'):.0f} MB"
        )
    if max_kld is not None and not _col(row, kld) <= max_kld:
        out.append(f"{kld} {_col(row, kld):.4g} > {max_kld:g}")
    if max_drop is not None and not _col(row, DROP_METRIC) <= max_drop:
        out.append(f"recall@1 drop {_col(row, DROP_METRIC):.3g} points > {max_drop:g}")
    if min_tps is not None:
        tps = _col(row, DECODE)
        if math.isnan(tps):
            out.append("no decode (an encoder)")
        elif tps < min_tps:
            out.append(f"decode {tps:.3g} tokens/s < {min_tps:g}")
    return out


def pareto_mask(tps: list[float], loss: list[float]) -> list[bool]:
    """True where no other point has decode >= and loss <= with one of them strictly better."""
    out = []
    for i, (t, lo) in enumerate(zip(tps, loss)):
        beaten = any(
            t2 >= t and l2 <= lo and (t2 > t or l2 < lo)
            for j, (t2, l2) in enumerate(zip(tps, loss))
            if j != i
        )
        out.append(not beaten and math.isfinite(t) and math.isfinite(lo))
    return out


def runtime_text(runtime: str) -> str:
    """How an answer names its runtime: "on qnn-npu", or the profile's own."""
    return f"on {runtime}" if runtime else "on the profile's own runtime"


def _rank(group, loss, kld, budget_mb, max_kld, max_drop, min_tps, objective, runtime=""):
    import pandas as pd

    rows = group.to_dict("records")
    reasons = [_reasons(r, loss, kld, budget_mb, max_kld, max_drop, min_tps) for r in rows]
    feasible = [not r for r in reasons]
    tps = [_col(r, DECODE) for r in rows]
    lossv = [_col(r, loss) if loss else math.nan for r in rows]
    mem = [_col(r, MEMORY) for r in rows]

    def score(i):  # smaller is better; NaN last
        key = {
            "decode": (-tps[i], lossv[i]),
            "accuracy": (lossv[i], -tps[i]),
            "memory": (mem[i], -tps[i]),
        }[objective]
        return tuple(math.inf if math.isnan(k) else k for k in key)

    ok = [i for i in range(len(rows)) if feasible[i]]
    best_i = min(ok, key=score) if ok else None
    front_idx = list(ok)
    front = (
        pareto_mask([tps[i] for i in front_idx], [lossv[i] for i in front_idx])
        if loss
        else [False] * len(front_idx)
    )
    on_front = {i for i, f in zip(front_idx, front) if f}
    what = {
        "decode": ("decode", tps, "tokens/s"),
        "accuracy": ("accuracy loss", lossv, ""),
        "memory": ("peak memory", mem, "MB"),
    }[objective]
    out = []
    for i, r in enumerate(rows):
        if i == best_i:
            verdict, why = (
                "best",
                f"highest {what[0]} of {len(ok)} feasible"
                if objective == "decode"
                else f"least {what[0]} of {len(ok)} feasible",
            )
        elif not feasible[i]:
            verdict, why = "infeasible", "; ".join(reasons[i])
        else:
            verdict = "loses"
            why = (
                f"feasible, {what[0]} {what[1][i]:.4g} vs {what[1][best_i]:.4g} {what[2]}"
            ).rstrip()
            if i in on_front:
                why += " (Pareto: less accuracy loss than faster points)"
        out.append(
            {
                **{c: r[c] for c in CANDIDATE_COLUMNS},
                "runtime": runtime,
                DECODE: tps[i],
                "accuracy_loss": lossv[i],
                MEMORY: mem[i],
                "pareto": i in on_front,
                "verdict": verdict,
                "why": f"{runtime_text(runtime)}: {why}",
            }
        )
    frame = pd.DataFrame(out)
    order = {"best": 0, "loses": 1, "infeasible": 2}
    frame = (
        frame.assign(_o=frame["verdict"].map(order), _t=-frame[DECODE].fillna(-1))
        .sort_values(["_o", "_t"])
        .drop(columns=["_o", "_t"])
        .reset_index(drop=True)
    )
    best = None if best_i is None else {**out[best_i]}
    return frame, best


def answer_line(a: Answer) -> str:
    s = a.scenario
    head = (
        f"{a.profile} {runtime_text(a.runtime)} ({s['prompt_tokens']} prompt + "
        f"{s['new_tokens']} new tokens, "
        f"context {s['context_tokens']}, batch {s['batch']}, {s['backend']})"
    )
    if a.best is None:
        return f"{head}: nothing feasible"
    b = a.best
    loss = "" if a.loss_metric is None else f", {a.loss_metric} {b['accuracy_loss']:.4g}"
    return (
        f"{head}: best {b['model']} / {b['policy']} / KV {b['kv_dtype']}: "
        f"{b[DECODE]:.4g} decode tokens/s, peak {b[MEMORY]:.0f} MB{loss}"
    )


def to_markdown(frame) -> str:
    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in frame.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v) for v in r) + " |")
    return "\n".join(lines) + "\n"


def _cell(v) -> str:
    from harmony_ref._format import fmt_number

    return str(fmt_number(v)).replace("|", "\\|")
