"""The model-lifecycle plot (`harmony-ref lifecycle --plot`): NPU memory held over the user's
entries per strategy, the NPU budget, and where the leak fails. 1400 px wide (14 in x 100 dpi),
matplotlib Agg, written atomically through a temporary file in the target folder."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

WIDTH_IN, HEIGHT_IN, DPI = 14.0, 6.0, 100  # 1400 x 600 px
COLOURS = {"destroy": "tab:blue", "resident": "tab:green", "leak": "tab:red"}
WIDTHS = {"destroy": 1.5, "resident": 5.0, "leak": 2.5}  # resident drawn wide under destroy


def plot_lifecycle(runs, path: str | Path, title: str) -> Path:
    """One step line per strategy: NPU MB while the feature is open (entry k) and after it is
    closed (k + 0.5); a dashed line at the budget; an x at each strategy's first failed entry."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(WIDTH_IN, HEIGHT_IN))
    budget = runs[0].budget_mb
    top = budget
    for r in runs:
        xs, ys = [0.5], [0.0]
        for e in r.entries:
            xs += [e.entry, e.entry + 0.5]
            ys += [e.npu_mb_open, e.npu_mb_closed]
        top = max(top, max(ys))
        ax.step(xs, ys, where="post", color=COLOURS[r.strategy], linewidth=WIDTHS[r.strategy],
                alpha=0.6 if r.strategy == "resident" else 1.0,
                label=r.strategy + (f" (fails at entry {r.fail_entry})" if r.fail_entry else ""))
        if r.fail_entry:
            ax.plot([r.fail_entry], [budget], marker="x", markersize=12, color=COLOURS[r.strategy])
    ax.axhline(budget, color="black", linestyle="--", linewidth=1,
               label=f"NPU budget npu.memory_mb = {budget:,.0f} MB")
    ax.set_xlim(0.5, len(runs[0].entries) + 1)
    ax.set_ylim(0, top * 1.35)  # head room above the budget for the legend
    ax.set_xlabel("entry (user opens the feature at k, closes it at k + 0.5)")
    ax.set_ylabel("NPU memory held (MB)")
    ax.set_title(f"Model lifecycle: NPU memory per strategy, {title}")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", ncol=2, frameon=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=DPI)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
        plt.close(fig)
    return path
