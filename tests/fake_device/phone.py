"""Fake phone for `calibrate --backend command`: prints llama-bench `-o json` output whose times are
what SimulatedDevice predicts on a base profile with HIDDEN efficiency factors and launch overhead
(the numbers a calibration should recover), plus provenance lines."""

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from harmony_ref.config import RunConfig  # noqa: E402
from harmony_ref.device.cost import phase_cost  # noqa: E402
from harmony_ref.device.runtime import load_profile  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--model", required=True)
ap.add_argument("--policy", required=True)
ap.add_argument("--prompt", type=int, required=True)
ap.add_argument("--new", type=int, required=True)
ap.add_argument("--base", default="harmony-flagship")
ap.add_argument("--compute-eff", type=float, default=0.31)
ap.add_argument("--memory-eff", type=float, default=0.62)
ap.add_argument("--launch-us", type=float, default=45.0)
# real llama-bench runs its tg test after 0 cached tokens (-d 0), not after the prompt: a phone
# whose output a runtime calibration (calibrate/phases.py) reads as llama-bench does
ap.add_argument("--tg-from-empty", action="store_true")
a = ap.parse_args()

p = load_profile(a.base)
p = dataclasses.replace(
    p,
    compute=dataclasses.replace(p.compute, compute_efficiency=a.compute_eff),
    memory=dataclasses.replace(p.memory, memory_efficiency=a.memory_eff),
    runtime=dataclasses.replace(p.runtime, launch_overhead_us=a.launch_us),
)
cfg = RunConfig.from_names(
    model=a.model,
    policy=a.policy,
    prompt_tokens=a.prompt,
    new_tokens=a.new,
    context_tokens=max(2048, a.prompt + a.new),
)
pre_ns = phase_cost(p, cfg, "prefill").time_s * 1e9
tg_cfg = dataclasses.replace(cfg, scenario=dataclasses.replace(cfg.scenario, prompt_tokens=1))
step_ns = phase_cost(p, tg_cfg if a.tg_from_empty else cfg, "decode").time_s * 1e9
common = {
    "build_commit": "fake",
    "cpu_info": "fake phone",
    "model_type": f"{a.model} {a.policy}",
    "n_threads": 4,
}
rows = [
    dict(
        common,
        n_prompt=a.prompt,
        n_gen=0,
        avg_ns=int(pre_ns),
        stddev_ns=0,
        avg_ts=a.prompt / pre_ns * 1e9,
        stddev_ts=0.0,
        samples_ns=[int(pre_ns)],
        samples_ts=[a.prompt / pre_ns * 1e9],
    ),
    dict(
        common,
        n_prompt=0,
        n_gen=a.new,
        avg_ns=int(a.new * step_ns),
        stddev_ns=0,
        avg_ts=1e9 / step_ns,
        stddev_ts=0.0,
        samples_ns=[int(a.new * step_ns)],
        samples_ts=[1e9 / step_ns],
    ),
]
print("device_model=FAKE-PHONE")
print(json.dumps(rows, indent=1))
