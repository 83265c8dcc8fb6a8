"""The Pareto plot of one `pick` answer: decode tokens/s against accuracy loss, one marker per
(model, policy, KV dtype), colour = model, shape = policy, area = peak memory, infeasible points
grey, the Pareto front of the feasible points as a line and the pick circled. Self-contained
(matplotlib only); the legend sits outside the axes so it never covers a point.

    path = pareto_plot(answer, "results/sweeps/phones/pareto-harmony-lowend.png")
"""

from __future__ import annotations

import math
from pathlib import Path

LOSS_LABELS = {"accuracy_drop_pct": "accuracy loss: MiniLM-L6 paraphrase recall@1 drop (points)"}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")


def _loss_label(name: str | None) -> str:
    if name is None:
        return "accuracy loss (not measured)"
    if name.endswith("kld_mean"):
        return f"accuracy loss: mean KL divergence to FP32 (nats), {name}"
    return LOSS_LABELS.get(name, name)


def _area(mb: float, lo: float, hi: float) -> float:
    """Marker area (pt^2) for a peak memory: 80..900 over the sweep's range."""
    if not math.isfinite(mb):
        return 80.0
    return 80.0 + 820.0 * ((mb - lo) / (hi - lo) if hi > lo else 0.5)


def pareto_plot(answer, path: str | Path, title: str | None = None) -> Path:
    """`pick --plot`: `pareto_figure` written to `path` (atomically, 1400 x 750 px)."""
    from harmony_ref.track.plot_style import save_png

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return save_png(pareto_figure(answer, title), path)


def pareto_figure(answer, title: str | None = None):
    """Decode tokens/s against accuracy loss per point of one phone and scenario: colour = model,
    shape = policy, marker area = peak memory, infeasible points grey, the feasible Pareto front
    dashed, the pick circled; the legend outside the data on the right."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from harmony_ref.track.plot_style import figure, style

    df = answer.frame
    models = sorted(set(df["model"]))
    policies = sorted(set(df["policy"]))
    colors = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(models)}
    shapes = {p: MARKERS[i % len(MARKERS)] for i, p in enumerate(policies)}
    mem = df["peak_memory_mb"].astype(float)
    lo, hi = float(mem.min()), float(mem.max())
    with style():
        fig, ax = figure(1400, 750)
        for r in df.itertuples(index=False):
            x, y = r.accuracy_loss, r.decode_tokens_per_s
            if not (math.isfinite(x) and math.isfinite(y)):
                continue
            grey = r.verdict == "infeasible"
            ax.scatter(
                [x],
                [y],
                s=_area(r.peak_memory_mb, lo, hi),
                marker=shapes[r.policy],
                c=["#c8c8c8" if grey else colors[r.model]],
                edgecolors="#9a9a9a" if grey else "black",
                linewidths=0.6,
                alpha=0.6 if grey else 0.9,
                zorder=2 if grey else 3,
            )
        front = df[df["pareto"]].sort_values("accuracy_loss")
        if len(front) > 1:
            ax.step(
                front["accuracy_loss"],
                front["decode_tokens_per_s"],
                where="post",
                color="black",
                lw=1.2,
                ls="--",
                zorder=1,
            )
        if answer.best is not None:
            b = answer.best
            ax.scatter(
                [b["accuracy_loss"]],
                [b["decode_tokens_per_s"]],
                s=1400,
                facecolors="none",
                edgecolors="red",
                linewidths=2.0,
                zorder=4,
            )
            xs = df["accuracy_loss"].astype(float)
            right = b["accuracy_loss"] > (xs.min() + xs.max()) / 2  # label towards the middle
            ax.annotate(
                f"pick: {b['model']} / {b['policy']}",
                (b["accuracy_loss"], b["decode_tokens_per_s"]),
                xytext=(-24 if right else 24, -6),
                textcoords="offset points",
                ha="right" if right else "left",
                va="top",
                color="red",
                fontsize=12,
                zorder=5,
            )
        ax.set_xlabel(_loss_label(answer.loss_metric), fontsize=12)
        ax.set_ylabel("decode tokens/s (predicted; log scale)", fontsize=12)
        ax.set_yscale("log")
        ax.margins(x=0.06, y=0.08)
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, which="both", alpha=0.3)
        ax.tick_params(labelsize=11)
        from harmony_ref.sweep.pick import runtime_text

        s = answer.scenario
        ax.set_title(
            title
            or f"{answer.profile} {runtime_text(answer.runtime)}: {s['prompt_tokens']} prompt + "
            f"{s['new_tokens']} "
            f"new tokens, batch {s['batch']} ({s['backend']})",
            fontsize=14,
        )
        handles = [
            Line2D(
                [],
                [],
                marker="o",
                ls="",
                color=colors[m],
                markeredgecolor="black",
                markersize=10,
                label=m,
            )
            for m in models
        ]
        handles += [
            Line2D(
                [],
                [],
                marker=shapes[p],
                ls="",
                color="white",
                markeredgecolor="black",
                markersize=10,
                label=p,
            )
            for p in policies
        ]
        handles += [
            Line2D(
                [],
                [],
                marker="o",
                ls="",
                color="#c8c8c8",
                markeredgecolor="#9a9a9a",
                markersize=10,
                label="infeasible",
            ),
            Line2D([], [], color="black", ls="--", label="Pareto front (feasible)"),
        ]
        for mb in (lo, hi):
            handles.append(
                Line2D(
                    [],
                    [],
                    marker="o",
                    ls="",
                    color="white",
                    markeredgecolor="black",
                    markersize=math.sqrt(_area(mb, lo, hi)),
                    label=f"peak memory {mb:,.0f} MB",
                )
            )
        ax.legend(
            handles=handles,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize=11,
            title="model (colour), policy (shape)",
            title_fontsize=11,
            labelspacing=1.0,
            borderaxespad=0.0,
            frameon=False,
        )
    return fig
