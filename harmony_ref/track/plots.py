"""The plots the commands write, in the house style of `track/plot_style.py`:

- `compare_panels` (`compare --plot`): small multiples, one panel per metric in its own unit,
  one bar per profile with its value printed, the best bar's label in bold; peak memory against
  each phone's app budget, cold start as stacked phases.
- `profile_bars` (`compare --plot --plot-view normalised`): every metric of the comparison on
  one page, each bar as a share of its metric's largest value, the real value printed beside it.
- `thermal_plot` (`thermal --plot`): decode tokens/s and die/skin temperature over time.
- `serve_plot` (`serve --plot`): each request's latency by arrival time and the wait queue.
- `history_plot` (`history --plot`): a metric over the commits, its samples and change points.
"""

from __future__ import annotations

import math
from pathlib import Path

from harmony_ref.track.plot_style import (
    REFERENCE_COLOUR,
    WIDTH_PX,
    figure,
    fmt_value,
    label_bars,
    pad_limits,
    profile_colours,
    profile_ticks,
    save_png,
    style,
    thousands,
)

PLOT_BUCKET_S = 5.0  # thermal: the governor dithers between adjacent steps; a short mean reads
# better than the raw trace

# compare --plot without --metrics: the answers a person picking a phone asks first.
DEFAULT_PANELS = (
    "ttft_ms",
    "decode_tokens_per_s",
    "peak_memory_mb",
    "sustained_peak_ratio_10min",
    "energy_per_token_mj",
    "coldstart_cold_ms",
)
PANEL_TITLES = {
    "ttft_ms": "Time to first token",
    "decode_tokens_per_s": "Decode speed",
    "peak_memory_mb": "Peak memory (bars) vs app budget (dashed)",
    "sustained_peak_ratio_10min": "Decode speed kept after 10 min",
    "energy_per_token_mj": "Energy per generated token",
    "coldstart_cold_ms": "Cold start: tap to first token",
    "coldstart_preload_ms": "Start with the model preloaded",
    "coldstart_preload_warmup_ms": "Start, preloaded and warmed up",
    "prefill_tokens_per_s": "Prefill speed",
    "e2e_ms": "Whole reply, prompt to last token",
    "memory_headroom_mb": "Memory left in the app budget",
    "time_to_first_throttle_s": "Time to first throttle",
    "peak_die_c": "Peak die temperature",
    "peak_skin_c": "Peak skin temperature",
    "fits_memory": "Fits the app budget",
}
AXIS_UNITS = {  # where the metric's unit alone would not say what is counted
    "energy_per_token_mj": "mJ per token",
    "sustained_peak_ratio_10min": "tokens/s at 10 min / peak tokens/s",
    "decode_dram_mb_per_token": "MB per token",
    "fits_memory": "1 = fits, 0 = does not",
}
COLDSTART_STEP_LABELS = {
    "storage_read": "storage read",
    "heap_copy": "copy to app heap",
    "page_fault": "page faults",
    "graph_parse": "graph parse",
    "npu_init": "NPU init",
    "first_touch": "first touch of buffers",
    "kernel_load": "kernel load",
    "first_token": "first token (warm TTFT)",
}
_DIRECTION = {"lower": "lower is better", "higher": "higher is better", "none": ""}


def coldstart_strategy(metric: str) -> str | None:
    """'cold' for coldstart_cold_ms (the strategy a cold-start metric totals), else None."""
    if metric.startswith("coldstart_") and metric.endswith("_ms"):
        return metric[len("coldstart_") : -len("_ms")]
    return None


def _panel_title(frame, metric: str) -> str:
    better = _DIRECTION.get(str(frame.loc[metric, "better"]), "")
    head = PANEL_TITLES.get(metric, metric)
    return f"{head}\n{metric}" + (f" · {better}" if better else "")


def _axis_label(frame, metric: str) -> str:
    unit = str(frame.loc[metric, "unit"])
    return AXIS_UNITS.get(metric, {"C": "°C"}.get(unit, unit))


def _best(frame, metric: str, profiles: list[str]) -> set[int]:
    marked = str(frame.loc[metric, "best"]).split(",")
    return {i for i, p in enumerate(profiles) if p in marked}


def _bar_panel(ax, frame, metric: str, profiles, colours) -> None:
    import numpy as np

    values = frame.loc[metric, profiles].to_numpy(dtype=float)
    x = np.arange(len(profiles))
    bars = ax.bar(x, np.nan_to_num(values), width=0.6, color=[colours[p] for p in profiles])
    unit = str(frame.loc[metric, "unit"])
    label_bars(ax, bars, values, unit, bold=_best(frame, metric, profiles))
    shown = list(values)
    if unit == "ratio" and metric.startswith("sustained"):
        ax.axhline(1.0, ls="--", lw=1.2, c=REFERENCE_COLOUR)
        ax.annotate(
            "peak = 1",
            (0, 1.0),
            xycoords=("axes fraction", "data"),
            xytext=(4, 3),
            textcoords="offset points",
            fontsize=10,
            color=REFERENCE_COLOUR,
        )
        shown.append(1.0)
    pad_limits(ax, shown)
    if np.nanmin(values) < 0:
        ax.axhline(0.0, lw=0.8, c=REFERENCE_COLOUR)
    profile_ticks(ax, x, profiles, colours)
    ax.set_xlim(-0.6, len(profiles) - 0.4)


def _memory_panel(ax, frame, metric: str, profiles, colours) -> None:
    """Peak memory bars with each phone's app budget as a dashed line across its own bar; a bar
    over its budget is hatched and says by how much."""
    import numpy as np

    values = frame.loc[metric, profiles].to_numpy(dtype=float)
    budget = frame.loc["app_budget_mb", profiles].to_numpy(dtype=float)
    x = np.arange(len(profiles))
    over = values > budget
    bars = ax.bar(
        x,
        np.nan_to_num(values),
        width=0.6,
        color=[colours[p] for p in profiles],
        hatch=["//" if o else "" for o in over],
        edgecolor="white",
        linewidth=0,
    )
    label_bars(ax, bars, values, "MB", bold=_best(frame, metric, profiles))
    for i in np.flatnonzero(over):
        ax.text(
            x[i],
            values[i] / 2,
            f"over budget\nby {fmt_value(values[i] - budget[i], 'MB')}",
            ha="center",
            va="center",
            color="white",
            fontweight="bold",
            bbox={"boxstyle": "round", "fc": colours[profiles[i]], "ec": "none"},
        )
    ax.hlines(budget, x - 0.42, x + 0.42, colors=REFERENCE_COLOUR, linestyles="--", lw=2)
    pad_limits(ax, list(values) + list(budget), headroom=0.28)
    profile_ticks(
        ax,
        x,
        profiles,
        colours,
        extra={p: f"budget\n{fmt_value(b, 'MB')}" for p, b in zip(profiles, budget)},
    )
    ax.set_xlim(-0.6, len(profiles) - 0.4)


def _stacked_panel(ax, frame, metric: str, phases, profiles, colours, step_colours) -> list:
    """Cold start as stacked phases (in the order they happen, bottom up), the total on top;
    returns the legend handles of the phases."""
    import numpy as np

    x = np.arange(len(profiles))
    bottom = np.zeros(len(profiles))
    handles = []
    for step, row in phases.iterrows():
        h = ax.bar(
            x,
            row[profiles].to_numpy(dtype=float),
            0.6,
            bottom=bottom,
            color=step_colours[step],
            edgecolor="white",
            linewidth=0.8,
            label=COLDSTART_STEP_LABELS.get(step, step),
        )
        bottom = bottom + row[profiles].to_numpy(dtype=float)
        handles.append(h)
    total = frame.loc[metric, profiles].to_numpy(dtype=float)
    if not np.allclose(bottom, total, rtol=1e-9, atol=1e-6):
        raise AssertionError(f"{metric}: phases sum to {bottom}, the metric says {total}")
    label_bars(ax, handles[-1], total, "ms", bold=_best(frame, metric, profiles))
    pad_limits(ax, total)
    profile_ticks(ax, x, profiles, colours)
    ax.set_xlim(-0.6, len(profiles) - 0.4)
    return handles


EXTRA_COLUMN_PX = 200  # a compare panel's width per column past three


def compare_panels(
    frame,
    path: str | Path,
    title: str,
    metrics=DEFAULT_PANELS,
    phases: dict | None = None,
    width_px: int = WIDTH_PX,
) -> Path:
    """`compare --plot`: `compare_figure` written to `path`."""
    return save_png(compare_figure(frame, title, metrics, phases, width_px), path)


def compare_figure(
    frame, title: str, metrics=DEFAULT_PANELS, phases: dict | None = None, width_px: int = WIDTH_PX
):
    """One panel per metric of `frame` (a track.compare frame), three to a row.
    `phases`: {strategy: frame} from track.compare.coldstart_phases; with it, cold-start metrics
    are stacked bars of their phases. Every metric must be a row of the frame (ValueError)."""
    from matplotlib import colormaps

    from harmony_ref.device.coldstart import STEPS
    from harmony_ref.track.compare import profile_columns

    missing = [m for m in metrics if m not in frame.index]
    if missing:
        raise ValueError(
            f"--metrics: {', '.join(missing)} not in this comparison; it has: "
            + ", ".join(frame.index)
        )
    profiles = profile_columns(frame)
    colours = profile_colours(profiles)
    # pastel, distinct hues: the phases read apart and never pass for a profile's colour
    set2 = list(colormaps["Set2"].colors)  # the grey (last) to page faults, absent by default
    set2[2], set2[-1] = set2[-1], set2[2]
    step_colours = dict(zip(STEPS, set2))
    ncols = min(3, len(metrics))
    nrows = math.ceil(len(metrics) / ncols)
    # room for each bar's value label ("37.9 tokens/s") beside its neighbours' when a panel
    # holds more than three columns
    width_px += max(0, len(profiles) - 3) * ncols * EXTRA_COLUMN_PX
    with style():
        fig, axes = figure(width_px, 120 + 420 * nrows, nrows, ncols, squeeze=False)
        legend = {}  # step -> a handle: the union over every stacked panel, in step order
        for ax, metric in zip(axes.flat, metrics):
            strategy = coldstart_strategy(metric)
            if phases and strategy in phases:
                handles = _stacked_panel(
                    ax, frame, metric, phases[strategy], profiles, colours, step_colours
                )
                legend.update(zip(phases[strategy].index, handles))
            elif metric == "peak_memory_mb" and "app_budget_mb" in frame.index:
                _memory_panel(ax, frame, metric, profiles, colours)
            else:
                _bar_panel(ax, frame, metric, profiles, colours)
            ax.set_title(_panel_title(frame, metric), fontsize=12)
            ax.set_ylabel(_axis_label(frame, metric))
            thousands(ax)
        for ax in axes.flat[len(metrics) :]:
            ax.set_visible(False)
        if legend:
            legend = [legend[s] for s in STEPS if s in legend]
            fig.legend(
                handles=legend,
                title="cold start phases, bottom to top of each bar",
                loc="outside lower center",
                ncols=min(4, len(legend)),
                frameon=False,
            )
        fig.suptitle(title)
        return fig


def profile_bars(frame, path: str | Path, title: str, width_px: int = WIDTH_PX) -> Path:
    """`compare --plot --plot-view normalised`: `normalised_figure` written to `path`."""
    return save_png(normalised_figure(frame, title, width_px), path)


def normalised_figure(frame, title: str, width_px: int = WIDTH_PX):
    """Every metric of a compare frame as a group of horizontal bars, one
    per profile, each the value divided by the largest absolute value of its metric across the
    profiles (so all share one axis, said on it), with the real value and unit printed beside."""
    import numpy as np

    from harmony_ref.track.compare import profile_columns

    profiles = profile_columns(frame)
    colours = profile_colours(profiles)
    values = frame[profiles].to_numpy(dtype=float)
    scale = np.nanmax(np.abs(values), axis=1, keepdims=True)
    scale[~(scale > 0)] = 1.0  # an all-zero row stays at zero
    norm = values / scale
    n_metrics, n_prof = norm.shape
    height = 0.8 / n_prof
    y = np.arange(n_metrics)
    with style():
        fig, ax = figure(width_px, 160 + n_metrics * (16 * n_prof + 14))
        for j, p in enumerate(profiles):
            bars = ax.barh(
                y + (j - (n_prof - 1) / 2) * height,
                np.nan_to_num(norm[:, j]),
                height,
                color=colours[p],
                label=p,
            )
            texts = ax.bar_label(
                bars,
                labels=[fmt_value(v, u) for v, u in zip(values[:, j], frame["unit"])],
                padding=3,
                fontsize=9,
            )
            for t, best in zip(texts, frame["best"]):
                if p in str(best).split(","):
                    t.set_fontweight("bold")
        arrows = {"lower": "lower is better", "higher": "higher is better", "none": "no direction"}
        ax.set_yticks(
            y, [f"{m}\n({arrows[d]})" for m, d in zip(frame.index, frame["better"])], fontsize=10
        )
        lo = min(0.0, float(np.nanmin(norm)))
        ax.set_xlim(lo - (0.15 if lo < 0 else 0.0), 1.3)
        ax.set_ylim(n_metrics - 0.5, -0.5)
        ax.axvline(0, color=REFERENCE_COLOUR, linewidth=0.8)
        ax.grid(True, axis="x")
        ax.grid(False, axis="y")
        ax.set_xlabel(
            "value / largest |value| of that metric across profiles (1 = largest); "
            "the printed number is the real value"
        )
        fig.legend(loc="outside lower center", ncols=n_prof, frameon=False)
        fig.suptitle(title)
        return fig


def thermal_plot(result, cfg, title: str, path: str | Path, width_px: int = WIDTH_PX) -> Path:
    """`thermal --plot`: `thermal_figure` written to `path`."""
    return save_png(thermal_figure(result, cfg, title, width_px), path)


def thermal_figure(result, cfg, title: str, width_px: int = WIDTH_PX):
    """Two panels sharing time, decode tokens/s (its peak, the 10-minute point
    and the first throttle marked) and die and skin temperature (with the trips), of a
    device.thermal SustainedResult."""
    import numpy as np

    s = result.series(bucket_s=max(result.trace.dt_s, PLOT_BUCKET_S))
    minutes = s["time_s"] / 60.0
    summary = result.summary()
    peak = result.peak_tokens_per_s
    with style():
        fig, (ax1, ax2) = figure(width_px, 800, 2, 1, sharex=True)
        ax1.plot(
            minutes,
            s["tokens_per_s"],
            c="#0072B2",
            lw=2,
            label=f"decode tokens/s ({PLOT_BUCKET_S:g} s mean)",
        )
        ax1.axhline(peak, ls="--", c=REFERENCE_COLOUR, label=f"peak {fmt_value(peak, 'tokens/s')}")
        throttle_s = summary["time_to_first_throttle_s"]
        if np.isfinite(throttle_s):
            for ax in (ax1, ax2):
                ax.axvline(throttle_s / 60.0, ls=":", c=REFERENCE_COLOUR)
            ax1.plot(
                [],
                [],
                ls=":",
                c=REFERENCE_COLOUR,
                label=f"first throttle at {fmt_value(throttle_s, 's')}",
            )
        at_10 = summary["sustained_tokens_per_s_10min"]
        if at_10 is not None:
            ax1.plot(
                [10.0],
                [at_10],
                "o",
                c="#D55E00",
                ms=8,
                label=f"10 min: {fmt_value(at_10, 'tokens/s')} "
                f"({summary['sustained_peak_ratio_10min']:.2f} of peak)",
            )
        ax1.set_ylabel("decode tokens/s")
        ax1.set_ylim(0, peak * 1.12)
        ax1.set_title("Decode speed")
        ax1.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        ax2.plot(minutes, s["die_c"], label="die", c="#D55E00", lw=2)
        ax2.plot(minutes, s["skin_c"], label="skin", c="#E69F00", lw=2)
        ax2.axhline(
            cfg.passive_trip_c, ls=":", c="#D55E00", label=f"passive trip {cfg.passive_trip_c:g} °C"
        )
        ax2.axhline(
            cfg.critical_trip_c,
            ls="--",
            c="#D55E00",
            label=f"critical / control {cfg.critical_trip_c:g} °C",
        )
        ax2.axhline(
            cfg.skin_limit_c, ls="--", c="#E69F00", label=f"skin limit {cfg.skin_limit_c:g} °C"
        )
        temps = [
            float(np.min(s["skin_c"])),
            float(np.max(s["die_c"])),
            cfg.critical_trip_c,
            cfg.passive_trip_c,
            cfg.skin_limit_c,
        ]
        span = max(temps) - min(temps)
        ax2.set_ylim(min(temps) - 0.08 * span, max(temps) + 0.08 * span)
        ax2.set_ylabel("temperature (°C)")
        ax2.set_xlabel("time (min)")
        ax2.set_title("Die and skin temperature")
        ax2.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        ax2.set_xlim(-0.01 * float(minutes[-1]), float(minutes[-1]) * 1.01)
        ax1.grid(True, axis="x")
        ax2.grid(True, axis="x")
        fig.suptitle(title)
        return fig


def queue_length_steps(outcomes) -> tuple[list[float], list[int]]:
    """(times, waiting) of the wait queue as a step function, rebuilt from request outcomes: a
    request waits from its arrival to its service start, or to its cut-off when it never started;
    one answered busy never waits."""
    events = []
    for o in outcomes:
        if o.status == "busy":
            continue
        leave = o.start_s if not math.isnan(o.start_s) else o.end_s
        if leave > o.request.arrival_s:
            events += [(o.request.arrival_s, 1), (leave, -1)]
    events.sort(key=lambda e: (e[0], e[1]))  # a leave before an arrival at the same instant
    times, waiting, n = [0.0], [0], 0
    for t, d in events:
        n += d
        times.append(t)
        waiting.append(n)
    return times, waiting


def serve_plot(result, title: str, path: str | Path, width_px: int = WIDTH_PX) -> Path:
    """`serve --plot`: `serve_figure` written to `path`."""
    return save_png(serve_figure(result, title, width_px), path)


def serve_figure(result, title: str, width_px: int = WIDTH_PX):
    """Each request by arrival time, its end-to-end latency and TTFT (completed),
    where it was cut off (timeout) or that it was answered busy; below, the requests waiting."""
    import numpy as np

    outs = result.outcomes
    horizon_min = result.horizon_s / 60.0
    with style():
        fig, (ax1, ax2) = figure(
            width_px, 800, 2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2]}
        )
        done = [o for o in outs if o.status == "completed"]
        cut = [o for o in outs if o.status == "timeout"]
        busy = [o for o in outs if o.status == "busy"]

        def arrival_min(group):
            return np.array([o.request.arrival_s for o in group]) / 60.0

        ax1.plot(
            arrival_min(done),
            [o.latency_s for o in done],
            "o",
            c="#0072B2",
            ms=6,
            label=f"completed: end-to-end latency ({len(done)})",
        )
        first = [o for o in outs if not math.isnan(o.first_token_s)]
        ax1.plot(
            arrival_min(first),
            [o.ttft_s for o in first],
            ".",
            c="#56B4E9",
            ms=6,
            label=f"time to first token ({len(first)})",
        )
        ax1.plot(
            arrival_min(cut),
            [o.latency_s for o in cut],
            "v",
            c="#D55E00",
            ms=8,
            label=f"timed out ({len(cut)})",
        )
        ax1.plot(
            arrival_min(busy),
            np.zeros(len(busy)),
            "x",
            c="#CC79A7",
            ms=8,
            mew=2,
            label=f"answered busy ({len(busy)})",
        )
        ax1.axhline(
            result.timeout_s,
            ls="--",
            c=REFERENCE_COLOUR,
            label=f"timeout {fmt_value(result.timeout_s, 's')}",
        )
        top = max([result.timeout_s] + [o.latency_s for o in done + cut])
        ax1.set_ylim(-0.06 * top, top * 1.12)
        ax1.set_ylabel("seconds from arrival")
        ax1.set_title("Requests by arrival time")
        ax1.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        times, waiting = queue_length_steps(outs)
        times = np.array(times + [result.horizon_s]) / 60.0
        waiting = waiting + [waiting[-1]]
        ax2.step(times, waiting, where="post", c="#009E73", lw=2, label="requests waiting")
        ax2.axhline(
            result.queue_limit,
            ls="--",
            c=REFERENCE_COLOUR,
            label=f"queue limit {result.queue_limit}",
        )
        ax2.set_ylim(-0.3, max(result.queue_limit, max(waiting)) + 0.8)
        ax2.yaxis.get_major_locator().set_params(integer=True)
        ax2.set_ylabel("requests waiting")
        ax2.set_xlabel("time (min)")
        ax2.set_title(
            f"Wait queue (session busy {result.busy_time_s / result.horizon_s:.0%} of the time)"
            if result.horizon_s > 0
            else "Wait queue"
        )
        ax2.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        ax2.set_xlim(-0.01 * horizon_min, horizon_min * 1.01)
        ax1.grid(True, axis="x")
        ax2.grid(True, axis="x")
        fig.suptitle(title)
        return fig


def history_plot(report, path: str | Path, width_px: int = WIDTH_PX) -> Path:
    """`history --plot`: `history_figure` written to `path`."""
    return save_png(history_figure(report, width_px), path)


def history_figure(report, width_px: int = WIDTH_PX):
    """One metric over the SUT's commits (track/history_report.py's HistoryReport): every raw
    sample as a dot, each commit's median joined by a line, each change point a dashed line
    before its first commit, labelled with that commit and its size, the commit range it could
    lie in shaded."""
    import numpy as np

    pts = report.points
    x = np.arange(len(pts))
    with style():
        fig, ax = figure(width_px, 700)
        for i, p in enumerate(pts):
            ax.scatter(np.full(len(p.samples), i), p.samples, s=10, c="#999999", alpha=0.6, lw=0)
        ax.plot(x, [p.median for p in pts], c="#0072B2", lw=2, marker="o", ms=4, label="median")
        for c in report.changes:
            colour = "#D55E00" if c.worse else "#009E73"
            ax.axvspan(c.point.lo - 1, c.point.hi, color=colour, alpha=0.08, lw=0)
            ax.axvline(c.point.index - 0.5, ls="--", c=colour)
            ax.annotate(
                f"{c.first[:7]}\n{c.point.change_pct:+.1f}%",
                (c.point.index - 0.5, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(4, -4),
                textcoords="offset points",
                va="top",
                color=colour,
                fontweight="bold",
            )
        step = max(1, len(pts) // 20)
        ax.set_xticks(x[::step], [p.commit[:7] for p in pts][::step], rotation=60, ha="right")
        ax.set_xlabel("commit of the system under test (git order)")
        ax.set_ylabel(f"{report.metric} ({report.unit}), {_DIRECTION[report.direction]}")
        ax.set_title(f"{report.metric}: {report.config} on {report.machine}")
        ax.legend(loc="lower right")
        thousands(ax)
    return fig
