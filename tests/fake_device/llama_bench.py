"""Fake llama-bench for `calibrate --backend command` on a host: prints `llama-bench -o json` output
(one pp and one tg test, after `-d` cached tokens, at `-t` threads) whose times are harmony-ref's own
prediction for a llama.cpp-host runtime with HIDDEN numbers on the xeon-2core-kvm SoC profile:
what a calibration should recover, and what held-out workloads it should then predict."""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from harmony_ref.calibrate.fit_runtime import with_params  # noqa: E402
from harmony_ref.calibrate.phases import Workload, phase_configs  # noqa: E402
from harmony_ref.calibrate.points import predict_metric  # noqa: E402
from harmony_ref.device.runtime import load_profile, load_runtime  # noqa: E402

HIDDEN = {"matmul": 0.05, "gemv": 0.04, "attention_decode": 0.03, "launch_us": 3.0}

ap = argparse.ArgumentParser()
ap.add_argument("-m", required=True)
ap.add_argument("-p", type=int, required=True)
ap.add_argument("-n", type=int, required=True)
ap.add_argument("-t", type=int, default=0)
ap.add_argument("-d", type=int, default=0)
ap.add_argument("-o", default="json")
a = ap.parse_args()

rt = with_params(load_runtime("llama.cpp-host"), HIDDEN)
prof = load_profile("xeon-2core-kvm", rt, a.t or None)
_, phases = phase_configs(Workload(a.m, "as-stored", a.p, a.n, a.t, a.d), "llama-bench")
pp_ms = predict_metric(prof, phases["prefill_ms"], "prefill_ms")
tg_ms = predict_metric(prof, phases["decode_step_ms"], "decode_step_ms")
common = {"n_depth": a.d, "n_threads": a.t or 1, "build_commit": "fake", "model_filename": a.m}
print(
    json.dumps(
        [
            {
                **common,
                "n_prompt": a.p,
                "n_gen": 0,
                "avg_ns": pp_ms * 1e6,
                "avg_ts": a.p / pp_ms * 1e3,
            },
            {
                **common,
                "n_prompt": 0,
                "n_gen": a.n,
                "avg_ns": tg_ms * a.n * 1e6,
                "avg_ts": 1e3 / tg_ms,
            },
        ]
    )
)
