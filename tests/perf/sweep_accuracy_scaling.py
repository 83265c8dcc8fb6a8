"""Wall time of an accuracy sweep on 1 and on 2 LocalCluster workers: one model, six policies,
one phone, parts predicted + accuracy (the accuracy part is job/main.py's: MiniLM-L6 on its
real weights today), each into a fresh store, in one run. The first accuracy task of the model
runs alone (the warm step, run.py), the other five after it. Run under /work/bin/quiet:
`python tests/perf/sweep_accuracy_scaling.py`."""

from __future__ import annotations

import tempfile
import time

from harmony_ref.sweep.grid import Grid
from harmony_ref.sweep.run import run_sweep
from harmony_ref.sweep.store import SweepStore

POLICIES = ("fp16", "int8", "int4-g128", "int4-g32", "mixed", "minilm-mixed")


def main() -> None:
    g = Grid(("qwen2.5-0.5b",), POLICIES, ("harmony-midrange",), ("predicted", "accuracy"))
    walls = {}
    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as root:
            t0 = time.perf_counter()
            s = run_sweep(g, SweepStore("acc", root), workers=workers, show_progress=False)
            walls[workers] = time.perf_counter() - t0
        assert s.failed == 0 and s.computed == len(POLICIES), s
        print(
            f"{workers} worker(s): {len(POLICIES)} points in {walls[workers]:.1f} s wall "
            f"({s.tasks} tasks)",
            flush=True,
        )
    print(f"speed-up 1 -> 2 workers: {walls[1] / walls[2]:.2f}x")


if __name__ == "__main__":
    main()
