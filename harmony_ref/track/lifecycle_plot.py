"""The model-lifecycle plot (`harmony-ref lifecycle --plot`): NPU memory held over the user's
entries per strategy, the NPU budget, and where the leak fails; in the house style of
track/plot_style.py (1400 px wide, units on the axes, the legend outside the data)."""

from __future__ import annotations

from pathlib import Path

from harmony_ref.track.plot_style import WIDTH_PX, figure, save_png, style

HEIGHT_PX = 640
COLOURS = {"destroy": "#0072B2", "resident": "#009E73", "leak": "#D55E00"}
WIDTHS = {"destroy": 1.5, "resident": 5.0, "leak": 2.5}  # resident drawn wide under destroy


def plot_lifecycle(runs, path: str | Path, title: str) -> Path:
    """`lifecycle --plot`: `lifecycle_figure` written to `path`."""
    return save_png(lifecycle_figure(runs, title), path)


def lifecycle_figure(runs, title: str, width_px: int = WIDTH_PX):
    """One step line per strategy: NPU MB while the feature is open (entry k) and after it is
    closed (k + 0.5); a dashed line at the budget; an x at each strategy's first failed entry."""
    budget = runs[0].budget_mb
    top = budget
    with style():
        fig, ax = figure(width_px, HEIGHT_PX)
        for r in runs:
            xs, ys = [0.5], [0.0]
            for e in r.entries:
                xs += [e.entry, e.entry + 0.5]
                ys += [e.npu_mb_open, e.npu_mb_closed]
            top = max(top, max(ys))
            ax.step(
                xs,
                ys,
                where="post",
                color=COLOURS[r.strategy],
                linewidth=WIDTHS[r.strategy],
                alpha=0.6 if r.strategy == "resident" else 1.0,
                label=r.strategy + (f" (fails at entry {r.fail_entry})" if r.fail_entry else ""),
            )
            if r.fail_entry:
                ax.plot(
                    [r.fail_entry],
                    [budget],
                    marker="x",
                    markersize=12,
                    ls="",
                    color=COLOURS[r.strategy],
                )
        ax.axhline(
            budget,
            color="black",
            linestyle="--",
            linewidth=1,
            label=f"NPU budget {budget:,.0f} MB\n(profile npu.memory_mb)",
        )
        ax.set_xlim(0.5, len(runs[0].entries) + 1)
        ax.set_ylim(0, top * 1.1)
        ax.set_xlabel("entry (the user opens the feature at k, closes it at k + 0.5)")
        ax.set_ylabel("NPU memory held (MB)")
        ax.set_title(f"Model lifecycle: NPU memory per strategy, {title}")
        ax.grid(True, alpha=0.3)
        ax.legend(
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            borderaxespad=0.0,
            frameon=False,
            title="strategy",
        )
    return fig
