"""The README's accuracy table, made from the tool's own output (paste it, do not type it):

    harmony-ref accuracy --model all-minilm-l6 --policy fp32 --policy int8 --policy int4-g128 --policy int4-g32 \\
        --policy minilm-mixed --json | python tools/readme_tables.py

tests/test_readme_numbers.py runs the same command and holds the README's rows to it: sizes and
recall exactly (as printed), cosines within the gate's numerical tolerance (they move in the
last digits across x86-64 machines, see harmony_ref/data/numerical_spread.json).
"""

from __future__ import annotations

import json
import sys

HEADER = (
    "| policy | Linear weights MB | mean / min cosine to FP32 | recall@1 | drop (points) |\n"
    "|---|---|---|---|---|"
)


def _cos(x: float) -> str:
    text = f"{x:.4f}"
    return "1" if text == "1.0000" else text


def accuracy_rows(report: dict) -> list[str]:
    """One Markdown row per policy of `harmony-ref accuracy --json`."""
    rows = []
    for policy, m in report["policies"].items():
        v = {k: d["value"] for k, d in m.items()}
        drop = v["accuracy_drop_pct"]
        rows.append(
            f"| {policy} | {v['linear_weights_mb']:.2f} | {_cos(v['cosine_mean'])} / "
            f"{_cos(v['cosine_min'])} | {v['recall_at_1']:.2f}% | "
            f"{'0' if policy == 'fp32' else f'{drop:.2f}'} |"
        )
    return rows


if __name__ == "__main__":
    print(HEADER)
    print("\n".join(accuracy_rows(json.load(sys.stdin))))
