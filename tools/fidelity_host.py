"""Record a host session for the committed fixtures that `harmony-ref fidelity` fits the
`harmony-ref-host` runtime on and scores it against (harmony_ref/data/fidelity/host/s*.json).

    /work/bin/quiet python tools/fidelity_host.py --out harmony_ref/data/fidelity/host/s1.json

It measures what `harmony-ref calibrate --backend host` measures on a user's machine, through the
same code (harmony_ref/calibrate/host_measure.py measure_session): this machine's
microbenchmarks, every run of harmony_ref/data/fidelity/host.toml (real SmolLM2-135M
generations through runtime/llama.py, timed end to end) and the per-call profiles of the runs
that name `profile_contexts`. Which runs are fitted and which are scored is that manifest's data,
fixed before any fit. Run it on a quiet machine: nothing else may share the two cores.
"""

from __future__ import annotations

import argparse
import json

from harmony_ref.calibrate.host_measure import measure_session
from harmony_ref.calibrate.host_runs import load_host_manifest


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated run ids (default all)")
    args = ap.parse_args()
    manifest = load_host_manifest()
    only = {r for r in args.only.split(",") if r}
    runs = [r for r in manifest.run if not only or r.id in only]
    data = measure_session(runs, manifest.model, progress=print)
    for rid, r in data["runs"].items():
        print(
            rid,
            f"prefill {r['prefill_ms']['value']:.1f} ms, step {r['decode_step_ms']['value']:.2f} ms",
        )
    with open(args.out, "w") as f:
        json.dump(data, f, indent=1)


if __name__ == "__main__":
    main()
