"""Plots the commands write (matplotlib, Agg backend, written atomically): profiles side by side
(`profile_bars`) and sustained generation over time (`thermal_plot`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


PLOT_BUCKET_S = 5.0  # thermal: the governor dithers between adjacent steps; a short mean reads
# better than the raw trace


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


def thermal_plot(result, cfg, title: str, path: str) -> None:
    """`harmony-ref thermal --plot`: two panels sharing time, decode tokens/s (with the peak) and
    die and skin temperature (with the trips), of a device.thermal SustainedResult. An unwritable
    path is a ValueError naming it (not the temporary file)."""
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result.series(bucket_s=max(result.trace.dt_s, PLOT_BUCKET_S))
    minutes = s["time_s"] / 60.0
    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    ax1.plot(minutes, s["tokens_per_s"], label=f"decode tokens/s ({PLOT_BUCKET_S:g} s mean)")
    ax1.axhline(result.peak_tokens_per_s, ls="--", c="grey", label="peak")
    ax1.set_ylabel("tokens/s")
    ax1.set_ylim(bottom=0)
    ax1.legend(loc="lower left")
    ax2.plot(minutes, s["die_c"], label="die", c="tab:red")
    ax2.plot(minutes, s["skin_c"], label="skin", c="tab:orange")
    ax2.axhline(cfg.passive_trip_c, ls=":", c="tab:red", label=f"passive trip {cfg.passive_trip_c:g} C")
    ax2.axhline(cfg.critical_trip_c, ls="--", c="tab:red", label=f"critical/control {cfg.critical_trip_c:g} C")
    ax2.axhline(cfg.skin_limit_c, ls="--", c="tab:orange", label=f"skin limit {cfg.skin_limit_c:g} C")
    ax2.set_ylabel("temperature (C)")
    ax2.set_xlabel("time (min)")
    ax2.legend(loc="lower right", fontsize="small")
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    tmp = f"{path}.tmp{os.getpid()}.png"
    try:
        fig.savefig(tmp, dpi=100)
        os.replace(tmp, path)
    except OSError as e:
        raise ValueError(f"--plot {path}: cannot write: {e.strerror}") from None
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.remove(tmp)
