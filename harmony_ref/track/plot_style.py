"""The house style of every plot the commands write, so they read alike: one figure size that is
readable at 1400 px wide, one colour per device profile wherever it appears, values printed on
bars in their own units, axis limits with room so nothing sits on the frame edge, legends beside
the data rather than over it, and PNGs written atomically.

    with style():
        fig, axes = figure(height_px=900, nrows=2, ncols=3)
        bars = axes[0, 0].bar(names, values, color=[colours[p] for p in names])
        label_bars(axes[0, 0], bars, values, "ms")
        pad_limits(axes[0, 0], values)
        save_png(fig, path)

Figures are `matplotlib.figure.Figure` objects (no pyplot state to close), drawn by the Agg
canvas, with constrained layout so titles, tick labels and outside legends get their space.
"""

from __future__ import annotations

import io
import math
from contextlib import contextmanager
from pathlib import Path

from harmony_ref._format import fmt_number
from harmony_ref._io import write_bytes_atomic

WIDTH_PX = 1400
DPI = 100

# Okabe-Ito: distinguishable with the common colour-vision deficiencies. The shipped profiles
# keep their colour in every plot; other profiles take the rest in the order they are given.
PALETTE = ("#0072B2", "#009E73", "#D55E00", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")
SHIPPED_COLOURS = {
    "harmony-flagship": PALETTE[0],
    "harmony-midrange": PALETTE[1],
    "harmony-lowend": PALETTE[2],
}
# a compare column's label: `profile · runtime` (track/compare.py Column)
LABEL_SEP = " · "
REFERENCE_COLOUR = "#444444"  # limits, budgets and trips drawn against the data
HEADROOM = 0.18  # share of the data range kept free above (and below) bars for their labels

_RC = {
    "font.size": 12,
    "axes.titlesize": 13,
    "axes.labelsize": 12,
    "xtick.labelsize": 11,
    "ytick.labelsize": 11,
    "legend.fontsize": 11,
    "figure.titlesize": 15,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.grid.axis": "y",
    "grid.alpha": 0.3,
    "axes.axisbelow": True,
    "axes.formatter.use_locale": False,
    "axes.formatter.limits": (-4, 6),
    "savefig.dpi": DPI,
    "figure.dpi": DPI,
}


@contextmanager
def style():
    """The house rcParams for everything created and saved inside the block."""
    import matplotlib

    with matplotlib.rc_context(_RC):
        yield


def figure(
    width_px: int = WIDTH_PX, height_px: int = 800, nrows: int = 1, ncols: int = 1, **subplots_kw
):
    """(fig, axes) of exactly width_px x height_px pixels when saved by `save_png`; `axes` as
    `Figure.subplots` returns it (one Axes, or an array for a grid; `squeeze=False`: always a
    2-D array)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, **subplots_kw)


def profile_colours(profiles) -> dict[str, str]:
    """Profile name (or compare label, `profile · runtime`) -> colour: the shipped profiles always
    alike (unless one is listed on several runtimes), the others from the palette in the order
    given (skipping colours the shipped ones use)."""
    # yellow last: as tick text on white it is the faintest
    spare = sorted((c for c in PALETTE if c not in SHIPPED_COLOURS.values()), key=_YELLOW.__eq__)
    phones = [p.partition(LABEL_SEP)[0] for p in profiles]
    out: dict[str, str] = {}
    n = 0
    for p, phone in zip(profiles, phones):
        if phone in SHIPPED_COLOURS and phones.count(phone) == 1:  # `phone · runtime` too
            out[p] = SHIPPED_COLOURS[phone]
        else:
            out[p] = spare[n % len(spare)]
            n += 1
    return out


_YELLOW = "#F0E442"


def fmt_value(value: float, unit: str = "") -> str:
    """How a value reads on a plot: whole numbers with separators from 1,000 up ("26,522 ms"),
    three significant digits below ("207 ms", "23.3 tokens/s", "0.588"), the tables' style for
    the very small or very large."""
    value = float(value)
    if not math.isfinite(value):
        return "n/a"
    if value != 0 and (abs(value) >= 1e7 or abs(value) < 1e-3):
        text = fmt_number(value)
    elif abs(value) >= 1000:
        text = f"{value:,.0f}"
    else:
        text = f"{value:.3g}"
    unit = {"C": "°C"}.get(unit, unit)
    return f"{text} {unit}" if unit and unit not in ("ratio", "bool") else text


def thousands(ax, axis: str = "y") -> None:
    """Tick labels as the bar labels read them, 26,000 rather than 26000 or 2.6e4, on an axis
    whose limits reach 1,000 (call after the limits are set); smaller axes keep the default."""
    from matplotlib.ticker import StrMethodFormatter

    lo, hi = ax.get_ylim() if axis == "y" else ax.get_xlim()
    if max(abs(lo), abs(hi)) >= 1000:
        (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(StrMethodFormatter("{x:,.0f}"))


def label_bars(ax, bars, values, unit: str = "", bold=(), inside: bool = False, **text_kw):
    """Print each bar's value (with its unit) at its end, outside the bar (inside for stacked
    totals that would collide); `bold`: indices whose label is bold (the best bar)."""
    labels = [fmt_value(v, unit) for v in values]
    texts = ax.bar_label(
        bars, labels=labels, padding=3, label_type="center" if inside else "edge", **text_kw
    )
    for i, t in enumerate(texts):
        if i in bold:
            t.set_fontweight("bold")
    return texts


def pad_limits(ax, values, axis: str = "y", zero: bool = True, headroom: float = HEADROOM):
    """Set the value axis so bars and their labels sit inside the frame: from 0 (or below the
    smallest negative value) to the largest value plus `headroom` of the span."""
    finite = [float(v) for v in values if math.isfinite(float(v))]
    lo = min(finite + ([0.0] if zero else []), default=0.0)
    hi = max(finite + ([0.0] if zero else []), default=1.0)
    span = (hi - lo) or abs(hi) or 1.0
    lo = lo - headroom * span if lo < 0 or not zero else lo
    hi = hi + headroom * span
    (ax.set_ylim if axis == "y" else ax.set_xlim)(lo, hi)


def profile_ticks(
    ax,
    positions,
    profiles,
    colours: dict[str, str],
    axis: str = "x",
    extra: dict[str, str] | None = None,
) -> None:
    """Category ticks naming the profiles, each label in its profile's colour (long names wrapped;
    `extra`: a second line per profile, e.g. its budget)."""
    labels = [wrap_name(p) + (f"\n{extra[p]}" if extra and p in extra else "") for p in profiles]
    set_ticks = ax.set_xticks if axis == "x" else ax.set_yticks
    set_ticks(positions, labels)
    ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    for t, p in zip(ticks, profiles):
        t.set_color(colours[p])
    ax.grid(False, axis=axis)


def wrap_name(name: str, width: int = 10) -> str:
    """A profile name as a tick label: broken after its first '-' when longer than `width`; a
    compare column's runtime (`profile · runtime`) on a line of its own."""
    profile, sep, runtime = name.partition(LABEL_SEP)
    if sep:
        return f"{wrap_name(profile, width)}\n{wrap_name(runtime, width + 4)}"
    if len(name) <= width or "-" not in name:
        return name
    head, tail = name.split("-", 1)
    return f"{head}-\n{tail}"


def save_png(fig, path: str | Path, flag: str = "--plot") -> Path:
    """Write `fig` as a PNG at its own size (no tight bbox: the size is the figure's), atomically
    through _io (missing folders made, the old file or the new one, never a part). An unwritable
    path is a ValueError naming the path the user gave (after `flag`), never a temporary file."""
    buf = io.BytesIO()
    with style():  # ticks are made while drawing: they read the house rcParams then
        fig.savefig(buf, format="png", dpi=DPI)
    try:
        return write_bytes_atomic(path, buf.getvalue())
    except OSError as e:
        raise ValueError(f"{flag} {path}: cannot write: {e.strerror or e}") from None


def layout_problems(fig) -> list[str]:
    """What a reader would trip over, found on the drawn figure (empty when none): a text or
    legend reaching past the figure's edge, a legend over any axes' data area, a label in an
    axes (a bar value, an annotation) crossing that axes' frame, two labels of one axes over each
    other, two tick labels of one axis over each other, and two titles over each other."""
    import itertools

    with style():
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        edge = fig.bbox
        out: list[str] = []
        axes = [a for a in fig.axes if a.get_visible()]

        def extent(t):
            return t.get_window_extent(r)

        def named(t) -> str:
            return repr(t.get_text()) if hasattr(t, "get_text") else type(t).__name__

        def shown(texts):
            return [t for t in texts if t.get_visible() and t.get_text().strip()]

        def ticks(axis):  # the labels drawn: ticks inside the view limits
            lo, hi = sorted(axis.get_view_interval())
            tol = 1e-9 * max(1.0, abs(hi - lo))
            return shown(
                [
                    t
                    for loc, t in zip(axis.get_majorticklocs(), axis.get_majorticklabels())
                    if lo - tol <= loc <= hi + tol
                ]
            )

        titles = shown([fig._suptitle] if fig._suptitle else [])
        for ax in axes:
            titles += shown([ax.title, ax._left_title, ax._right_title])
        legends = list(fig.legends) + [ax.get_legend() for ax in axes if ax.get_legend()]
        everything = list(titles) + legends + shown(fig.texts)
        for ax in axes:
            everything += shown([ax.xaxis.label, ax.yaxis.label, *ax.texts])
            everything += ticks(ax.xaxis) + ticks(ax.yaxis)
        for t in everything:
            b = extent(t)
            if (
                b.x0 < edge.x0 - 0.5
                or b.y0 < edge.y0 - 0.5
                or b.x1 > edge.x1 + 0.5
                or b.y1 > edge.y1 + 0.5
            ):
                out.append(f"{named(t)} reaches past the figure's edge")
        for leg in legends:
            for ax in axes:
                if extent(leg).overlaps(ax.bbox):
                    out.append(f"a legend lies over the data area of {ax.get_title()!r}")
        for a, b in itertools.combinations(titles, 2):
            if extent(a).overlaps(extent(b)):
                out.append(f"titles {named(a)} and {named(b)} overlap")
        for ax in axes:
            labels = shown(ax.texts)
            for t in labels:
                b = extent(t)
                if not (
                    ax.bbox.x0 <= b.x0
                    and b.x1 <= ax.bbox.x1
                    and ax.bbox.y0 <= b.y0
                    and b.y1 <= ax.bbox.y1
                ):
                    out.append(f"label {named(t)} crosses the frame of {ax.get_title()!r}")
            groups = [labels, ticks(ax.xaxis), ticks(ax.yaxis)]
            for group in groups:
                for a, b in itertools.combinations(group, 2):
                    if extent(a).overlaps(extent(b)):
                        out.append(f"{named(a)} and {named(b)} overlap in {ax.get_title()!r}")
        return out
