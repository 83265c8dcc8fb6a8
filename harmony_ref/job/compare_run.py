"""The comparison's runs: `compare_profiles` runs the device-dependent, exact parts of the main
job (predicted metrics, cold start, 10-minute thermal summary) once per column of
track/compare.py `compare_columns` and returns a pandas frame with metrics as rows and column
labels as columns, plus a `best` column naming the column(s) with the best value of each row
(track/compare.py `best_profiles`). It sits with the job, above track/, because it runs the
job's parts (main.py `run_part`); the columns, labels and tables stay in track/compare.py.
"""

from __future__ import annotations

import math

from harmony_ref.track.compare import COMPARE_PARTS, best_profiles, compare_columns


def compare_profiles(
    profiles: list[str],
    model,  # a spec name or ModelSpec (runtime/loader.py resolve_model)
    policy: str,
    prompt_tokens: int = 512,
    new_tokens: int = 128,
    context_tokens: int = 2048,
    batch: int = 1,
    parts: tuple[str, ...] = COMPARE_PARTS,
    runtime: str | None = None,
):
    """(frame, notes): the frame is indexed by metric with columns unit, better, <column
    labels...>, best (`compare_columns` makes the columns of `profiles` and `runtime`); notes
    say which parts could not run here (an input out of reach)."""
    import pandas as pd

    from harmony_ref.checkpoint.assets import AssetUnavailable
    from harmony_ref.job.main import PARTS, run_part  # looked up per call (tests replace PARTS)

    cols = compare_columns(profiles, runtime)
    profiles = [c.label for c in cols]
    columns: dict[str, dict[str, float]] = {}
    meta: dict[str, tuple[str, str]] = {}
    notes: list[str] = []
    by_name = {p.name: p for p in PARTS}
    for col in cols:
        config = col.config(model, policy, prompt_tokens, new_tokens, context_tokens, batch)
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
        columns[col.label] = values
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
