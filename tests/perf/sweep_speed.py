"""Speed of simulated-only sweeps: 10,800 points (6 models x 5 policies x 3 phones x 5 prompt
lengths x 4 generation lengths x 3 batch sizes x 2 KV dtypes, part `predicted`) in this process
(--workers 0) and on a 2-worker LocalCluster, in one run, alternating, each into a fresh store.
Run under /work/bin/quiet: `python tests/perf/sweep_speed.py [REPEATS] [POINTS_CAP]`.
Prints points/s per run and the cluster / in-process ratio of the medians."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time

from harmony_ref.sweep.grid import Grid
from harmony_ref.sweep.run import run_sweep
from harmony_ref.sweep.store import SweepStore

MODELS = (
    "llama-3.2-1b",
    "llama-3.2-3b",
    "llama-2-7b",
    "qwen2.5-0.5b",
    "qwen2.5-1.5b",
    "qwen2.5-7b",
)
POLICIES = ("fp16", "int8", "int4-g128", "int4-g32", "mixed")
PROFILES = ("harmony-flagship", "harmony-midrange", "harmony-lowend")


def grid(models=MODELS) -> Grid:
    return Grid(
        models,
        POLICIES,
        PROFILES,
        ("predicted",),
        scenario={
            "prompt_tokens": (64, 128, 256, 512, 1024),
            "new_tokens": (32, 64, 128, 256),
            "context_tokens": (2048,),
            "batch": (1, 2, 4),
            "kv_dtype": ("fp16", "int8"),
        },
    )


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    models = MODELS[: int(sys.argv[2])] if len(sys.argv) > 2 else MODELS
    g = grid(models)
    times = {"in-process": [], "LocalCluster(2)": []}
    for r in range(repeats):
        for label, workers in (("in-process", 0), ("LocalCluster(2)", 2)):
            with tempfile.TemporaryDirectory() as root:
                t0 = time.perf_counter()
                s = run_sweep(g, SweepStore("speed", root), workers=workers, show_progress=False)
                wall = time.perf_counter() - t0
            assert s.computed == g.size and s.failed == 0, s
            times[label].append(wall)
            print(
                f"round {r + 1} {label:>16}: {g.size} points in {wall:6.1f} s = "
                f"{g.size / wall:7.0f} points/s ({s.tasks} tasks)",
                flush=True,
            )
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"median: in-process {med['in-process']:.1f} s, LocalCluster(2) "
        f"{med['LocalCluster(2)']:.1f} s; cluster speed / in-process speed = "
        f"{med['in-process'] / med['LocalCluster(2)']:.2f}"
    )


if __name__ == "__main__":
    main()
