"""Device profiles side by side: one config predicted on several phones, each on a runtime.

A column is a profile on a runtime (`compare_columns`): "dimensity-9300" runs the profile's own
`default_runtime`, "snapdragon-8-gen-3:llama.cpp-cpu" the runtime named after the colon, and
`runtime` runs every profile given without one on it; one phone may appear on several runtimes.
Each column is labelled `profile · runtime` ("· own" for a profile that names no runtime: its
own efficiency fields), so no table or plot compares runtimes without saying so, and
`runtime_note` is the one line that warns when the columns differ in runtime. A runtime whose
unit the SoC lacks is refused before any work (device/runtime.py apply_runtime).

`best_profiles` names the column(s) with the best value of a row (direction-aware; `direction =
"none"` rows and rows where every column ties are not marked); job/compare_run.py
`compare_profiles` runs the job's parts once per column and builds the frame. `coldstart_phases`
splits the cold-start totals into the model's steps, for the stacked bars of `compare --plot`.
"""

from __future__ import annotations

from dataclasses import dataclass

from harmony_ref._format import fmt_number
from harmony_ref.config import RunConfig
from harmony_ref.track.plot_style import LABEL_SEP

COMPARE_PARTS = ("predicted", "coldstart", "thermal")
COLDSTART_LOADER = "read"  # the loader the coldstart part reports (device.coldstart default)
OWN_RUNTIME = "own"  # a label's runtime for a profile that names none: its own efficiency fields


@dataclass(frozen=True)
class Column:
    profile: str  # a shipped profile name or a profile TOML path
    runtime: str  # the runtime it runs: named, else the profile's default_runtime; "" for none
    explicit: str  # the runtime as given ("" = the profile's own default)

    @property
    def label(self) -> str:
        return f"{self.profile}{LABEL_SEP}{self.runtime or OWN_RUNTIME}"

    def config(self, model, policy, prompt_tokens, new_tokens, context_tokens, batch) -> RunConfig:
        return RunConfig.from_names(
            model,
            policy,
            prompt_tokens,
            new_tokens,
            context_tokens,
            batch,
            profile=self.profile,
            runtime=self.explicit,
        )


def compare_columns(profiles: list[str], runtime: str | None = None) -> list[Column]:
    """The columns of `--profiles` items ("PROFILE" or "PROFILE:RUNTIME") and `--runtime`, each
    profile loaded on its runtime here (a runtime whose unit the SoC lacks is a ValueError)."""
    from harmony_ref.device.runtime import load_profile
    from harmony_ref.device.soc import runtime_name

    if len(profiles) < 1:
        raise ValueError("--profiles: give at least one profile")
    out = []
    for item in profiles:
        profile, _, rt = (s.strip() for s in item.partition(":"))
        if not profile or (":" in item and not rt):
            raise ValueError(f"--profiles {item!r}: give PROFILE or PROFILE:RUNTIME")
        if rt and runtime:
            raise ValueError(
                f"--profiles {item!r} names its runtime and --runtime {runtime!r} names one for "
                "every profile: give one or the other"
            )
        where = f"--profiles {item!r}" if rt else f"--runtime {runtime!r} on {profile}"
        rt = rt or runtime or ""
        try:
            load_profile(profile, rt or None)
        except ValueError as e:  # named by the flag, unless that makes the line too long
            text = f"{where}: {e}"
            raise ValueError(text if len(text) < 170 else str(e)) from None
        out.append(Column(profile, runtime_name(profile, rt), rt))
    labels = [c.label for c in out]
    twice = next((c for c in labels if labels.count(c) > 1), None)
    if twice:
        raise ValueError(f"--profiles: a profile and runtime are listed twice: {twice}")
    return out


def runtime_note(columns: list[Column]) -> str:
    """The one line that says the columns differ in runtime ("" when they all run one)."""
    runtimes = list(dict.fromkeys(c.runtime or OWN_RUNTIME for c in columns))
    if len(runtimes) < 2:
        return ""
    if len({c.profile for c in columns}) == 1:
        return (
            f"one phone on {len(runtimes)} runtimes ({', '.join(runtimes)}): the columns "
            "compare runtimes"
        )
    return (
        f"the columns run {len(runtimes)} different runtimes ({', '.join(runtimes)}): they "
        "compare runtimes as well as phones; --runtime R runs every profile on one"
    )


def coldstart_phases(
    profiles: list[str],
    model,  # a spec name or ModelSpec (runtime/loader.py resolve_model)
    policy: str,
    prompt_tokens: int = 512,
    new_tokens: int = 128,
    context_tokens: int = 2048,
    batch: int = 1,
    loader: str = COLDSTART_LOADER,
    runtime: str | None = None,
) -> dict:
    """{strategy: frame} of the cold-start model's steps on the user's clock: rows are the steps
    (ms) any column pays for that strategy, in the order they happen, columns the column labels
    (compare_columns). Each column sums to the frame's `coldstart_<strategy>_ms` (same model,
    same loader)."""
    import pandas as pd

    from harmony_ref.device.coldstart import STEPS, STRATEGIES, breakdown
    from harmony_ref.device.runtime import config_profile

    rows = {}
    cols = compare_columns(profiles, runtime)
    profiles = [c.label for c in cols]
    for col in cols:
        config = col.config(model, policy, prompt_tokens, new_tokens, context_tokens, batch)
        rows[col.label] = {
            r["strategy"]: r
            for r in breakdown(config_profile(config), config)
            if r["loader"] == loader
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
