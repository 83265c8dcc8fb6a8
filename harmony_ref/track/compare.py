"""Device profiles side by side: one config predicted on several phones.

`compare_profiles` runs the device-dependent, exact parts of the main job (predicted metrics,
cold start, 10-minute thermal summary) once per profile and returns a pandas frame with metrics
as rows and profiles as columns, plus a `best` column naming the profile(s) with the best value
of each row (direction-aware; `direction = "none"` rows and rows where every profile ties
are not marked). `coldstart_phases` splits the cold-start totals into the model's steps, for the
stacked bars of `compare --plot`.
"""

from __future__ import annotations

import math

from harmony_ref._format import fmt_number
from harmony_ref.config import RunConfig

COMPARE_PARTS = ("predicted", "coldstart", "thermal")
COLDSTART_LOADER = "read"  # the loader the coldstart part reports (device.coldstart default)


def compare_profiles(
    profiles: list[str],
    model: str,
    policy: str,
    prompt_tokens: int = 512,
    new_tokens: int = 128,
    context_tokens: int = 2048,
    batch: int = 1,
    parts: tuple[str, ...] = COMPARE_PARTS,
):
    """(frame, notes): the frame is indexed by metric with columns unit, better, <profiles...>,
    best; notes say which parts could not run here (an input out of reach)."""
    import pandas as pd

    from harmony_ref.checkpoint.assets import AssetUnavailable
    from harmony_ref.track.job import PARTS, run_part

    if len(profiles) < 1:
        raise ValueError("--profiles: give at least one profile")
    if len(set(profiles)) != len(profiles):
        raise ValueError(f"--profiles: a profile is listed twice: {profiles}")
    columns: dict[str, dict[str, float]] = {}
    meta: dict[str, tuple[str, str]] = {}
    notes: list[str] = []
    by_name = {p.name: p for p in PARTS}
    for profile in profiles:
        config = RunConfig.from_names(
            model, policy, prompt_tokens, new_tokens, context_tokens, batch, profile=profile
        )
        values: dict[str, float] = {}
        for name in parts:
            try:
                got = run_part(by_name[name], config)
            except AssetUnavailable as e:
                note = f"{name}: not available ({e})"
                if note not in notes:
                    notes.append(note)
                continue
            for m in got:
                values[m.name] = m.value
                meta.setdefault(m.name, (m.unit, m.direction))
        columns[profile] = values
    if not meta:
        raise ValueError("no metrics to compare: " + "; ".join(notes))
    rows = list(meta)
    frame = pd.DataFrame(
        {p: [columns[p].get(r, math.nan) for r in rows] for p in profiles}, index=rows
    )
    frame.index.name = "metric"
    frame.insert(0, "unit", [meta[r][0] for r in rows])
    frame.insert(1, "better", [meta[r][1] for r in rows])
    frame["best"] = [best_profiles(frame.loc[r, profiles], meta[r][1]) for r in rows]
    return frame, notes


def coldstart_phases(
    profiles: list[str],
    model: str,
    policy: str,
    prompt_tokens: int = 512,
    new_tokens: int = 128,
    context_tokens: int = 2048,
    batch: int = 1,
    loader: str = COLDSTART_LOADER,
) -> dict:
    """{strategy: frame} of the cold-start model's steps on the user's clock: rows are the steps
    (ms) any profile pays for that strategy, in the order they happen, columns the profiles. Each
    column sums to the frame's `coldstart_<strategy>_ms` (same model, same loader)."""
    import pandas as pd

    from harmony_ref.device.coldstart import STEPS, STRATEGIES, breakdown

    rows = {}
    for profile in profiles:
        config = RunConfig.from_names(
            model, policy, prompt_tokens, new_tokens, context_tokens, batch, profile=profile
        )
        rows[profile] = {
            r["strategy"]: r for r in breakdown(profile, config) if r["loader"] == loader
        }
    out = {}
    for strategy in STRATEGIES:
        f = pd.DataFrame(
            {p: [rows[p][strategy][f"{s}_ms"] for s in STEPS] for p in profiles}, index=list(STEPS)
        )
        f.index.name = "step"
        out[strategy] = f[(f != 0).any(axis=1)]
    return out


def best_profiles(values, direction: str) -> str:
    """Comma-separated profile(s) holding the best value of a row ('' when not ranked)."""
    vals = values.dropna()
    if direction == "none" or vals.empty or len(values) < 2:
        return ""
    if vals.nunique() == 1:
        return ""  # all profiles equal: nothing to mark
    target = vals.min() if direction == "lower" else vals.max()
    return ",".join(str(p) for p, v in vals.items() if v == target)


def profile_columns(frame) -> list[str]:
    return [c for c in frame.columns if c not in ("unit", "better", "best")]


def marked_frame(frame, mark: str = "*"):
    """String frame for people: best value of each row suffixed with `mark`."""
    import pandas as pd

    profiles = profile_columns(frame)
    out = pd.DataFrame(index=frame.index)
    out["unit"] = frame["unit"]
    out["better"] = frame["better"]
    for p in profiles:
        out[p] = [
            fmt_number(float(v)) + (mark if p in str(best).split(",") else "")
            for v, best in zip(frame[p], frame["best"])
        ]
    return out.reset_index()


def to_markdown(frame) -> str:
    m = marked_frame(frame, mark="**")
    profiles = profile_columns(frame)
    for p in profiles:  # "1.2**" -> "**1.2**"
        m[p] = [f"**{v[:-2]}**" if v.endswith("**") else v for v in m[p]]
    lines = [
        "| " + " | ".join(m.columns) + " |",
        "|" + "|".join(["---"] * 3 + ["---:"] * len(profiles)) + "|",
    ]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in m.itertuples(index=False)]
    return (
        "\n".join(lines)
        + "\n\nBest value per row in bold (direction-aware; `none` rows and all-equal rows are not marked).\n"
    )
