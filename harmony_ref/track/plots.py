"""Plots for the tracking commands (matplotlib, Agg backend, written atomically)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _save_atomic(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=path.suffix or ".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120, bbox_inches="tight")
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def profile_bars(frame, path: str | Path, title: str) -> Path:
    """Grouped bar chart of a compare frame: one group per metric, one bar per profile, each
    metric normalised by its largest absolute value so all share one axis (said on the plot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from harmony_ref.track.compare import profile_columns

    profiles = profile_columns(frame)
    values = frame[profiles].to_numpy(dtype=float)
    scale = np.nanmax(np.abs(values), axis=1, keepdims=True)
    scale[~(scale > 0)] = 1.0  # an all-zero row stays at zero
    norm = values / scale
    n_metrics, n_prof = norm.shape
    width = 0.8 / n_prof
    x = np.arange(n_metrics)
    fig, ax = plt.subplots(figsize=(max(8.0, 0.9 * n_metrics + 2), 5.0))
    for j, p in enumerate(profiles):
        ax.bar(x + (j - (n_prof - 1) / 2) * width, np.nan_to_num(norm[:, j]), width, label=p)
    arrows = {"lower": " (lower better)", "higher": " (higher better)", "none": ""}
    ax.set_xticks(x, [f"{m}{arrows[d]}" for m, d in zip(frame.index, frame["better"])],
                  rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("value / largest value of that metric")
    ax.set_ylim(min(0.0, float(np.nanmin(norm)) * 1.05), 1.1)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_title(f"{title}\nnormalised per metric: each bar is divided by the largest value of its "
                 "metric across profiles", fontsize=10)
    ax.legend(title="profile", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", alpha=0.3)
    try:
        return _save_atomic(fig, Path(path))
    finally:
        plt.close(fig)
