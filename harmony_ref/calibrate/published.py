"""Published figures of real phones, as data: harmony_ref/data/fidelity/published.toml (the
calibration figures, each with its citation), published-heldout.toml (published figures no
runtime is fitted on, all split "score") or any file of that shape.

    figures = load_figures()                  # the shipped calibration figures
    figures = load_figures(shipped=HELDOUT_FIGURES)   # the shipped held-out figures
    figures = load_figures("heldout.toml")    # someone's file of figures to score on
    points = figure_points(figures)           # calibrate/points.py Points, set "phones"

A file is an array of tables `[[figure]]`, each validated through harmony_ref/_schema.py
from_table like a profile (a defect names the file, the field and the value): `id` (unique),
`source` (the citation), `device`, `profile` (a SoC profile), `runtime` (a runtime profile),
`threads` (0: the runtime's default), `model` (a model spec), `policy`, `prompt_tokens`,
`new_tokens`, `context_tokens` (0: prompt + new, at least 2048 when the model allows), `kv_dtype`,
`metric` (POINT_METRICS), `value` (as published, in the metric's unit) and `split` ("fit" for
calibration figures, "score" for figures held out to judge the model).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from harmony_ref._schema import from_table
from harmony_ref.calibrate.points import POINT_METRICS, SPLITS, Point

SHIPPED_FIGURES = "published.toml"
HELDOUT_FIGURES = "published-heldout.toml"  # split "score" only: no runtime is fitted on them


@dataclass(frozen=True)
class Figure:
    id: str
    source: str
    profile: str
    runtime: str
    model: str
    policy: str
    metric: str = field(metadata={"choices": POINT_METRICS})
    value: float = field(metadata={"min": 1e-12})
    split: str = field(metadata={"choices": SPLITS})
    prompt_tokens: int = field(metadata={"min": 1})
    new_tokens: int = field(default=128, metadata={"min": 1})
    context_tokens: int = field(default=0, metadata={"min": 0})
    kv_dtype: str = field(default="fp16", metadata={"choices": ("fp16", "int8")})
    threads: int = field(default=0, metadata={"min": 0})
    device: str = ""


@dataclass(frozen=True)
class FigureFile:
    figure: tuple[Figure, ...]


def _read(path, shipped: str) -> tuple[dict, str]:
    from harmony_ref._toml import loads

    if path is None:
        text = (resources.files("harmony_ref") / "data" / "fidelity" / shipped).read_text()
        return loads(text, f"data/fidelity/{shipped}"), f"data/fidelity/{shipped}"
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"figures file {p} does not exist")
    return loads(p.read_text(), str(p)), str(p)


def load_figures(path=None, shipped: str = SHIPPED_FIGURES) -> tuple[Figure, ...]:
    """The figures of a file, or with no path of the shipped file `shipped` (the calibration
    figures by default; HELDOUT_FIGURES: the held-out ones), every name checked."""
    from harmony_ref.device.runtime import load_runtime
    from harmony_ref.device.soc import load_soc
    from harmony_ref.model.spec import get_spec
    from harmony_ref.quant.policy import load_policy

    data, source = _read(path, shipped)
    figures = from_table(FigureFile, data, source).figure
    seen = set()
    for i, f in enumerate(figures):
        where = f"{source}: field 'figure[{i}]"
        if f.id in seen:
            raise ValueError(f"{where}.id' = {f.id!r}: another figure has that id")
        seen.add(f.id)
        for key, load in (
            ("profile", load_soc),
            ("runtime", load_runtime),
            ("model", get_spec),
            ("policy", load_policy),
        ):
            try:
                load(getattr(f, key))
            except (ValueError, OSError) as e:
                raise ValueError(f"{where}.{key}' = {getattr(f, key)!r}: {e}") from None
        try:  # its scenario (prompt, new tokens, context against the model), named by the figure
            figure_config(f)
        except ValueError as e:
            raise ValueError(f"{source}: figure {f.id!r}: {e}") from None
    return figures


def figure_config(f: Figure):
    from harmony_ref.config import RunConfig, fitting_context
    from harmony_ref.model.spec import get_spec

    spec = get_spec(f.model)
    context = f.context_tokens or min(
        fitting_context(f.prompt_tokens, f.new_tokens), spec.max_positions
    )
    return RunConfig.from_names(
        f.model,
        f.policy,
        f.prompt_tokens,
        f.new_tokens,
        context,
        kv_dtype=f.kv_dtype,
        profile=f.profile,
    )


def figure_points(figures) -> list[Point]:
    return [
        Point(
            f.id,
            "phones",
            f.profile,
            f.runtime,
            f.threads,
            figure_config(f),
            f.metric,
            f.value,
            f.split,
            source=f.source,
            note=f.device,
        )
        for f in figures
    ]
