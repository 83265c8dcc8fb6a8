"""Spread of the `numerical` metrics (accuracy computed with float kernels) across emulated
machines: the measurement the gate's numerical tolerance is derived from.

Each configuration is a fresh process with the environment of one emulated x86-64 machine
(harmony_ref/_cpus.py EMULATED_CPUS: Numba's target CPU and features, OpenBLAS's core type, NumPy's
dispatch, the int8-dot matmul path, 1 or 2 threads; Intel Haswell to Sapphire Rapids, AMD Zen 3
to Zen 5, and the AMD EPYC CI meets).

    python tools/numerical_spread.py --out harmony_ref/data/numerical_spread.json
    python tools/numerical_spread.py --lm --out harmony_ref/data/lm_numerical_spread.json

The first measures MiniLM's embedding metrics, the second (`--lm`) the decoder's `lm_*` metrics
as the main job computes them (SmolLM2-135M, the first 2 chunks of 512 of the held-out corpus,
KV fp16; the FP32 reference recomputed in every configuration, no cache). Each prints a table (metric x policy: min, max, relative spread %) and writes every value, so the
tolerance in harmony_ref/data/gate_tolerances.toml can be re-derived (see its `numerical`
comment). It takes a few minutes per configuration (Numba compiles for each target CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from harmony_ref._cpus import Unemulable, by_name, environment, host_features

# MiniLM: the README accuracy table's policies; decoder: the gate's default policy, int8, and the
# README's int4-g32 and mixed rows
POLICIES = ("int8", "int4-g128", "int4-g32", "minilm-mixed")
LM_POLICIES = ("int8", "int4-g128", "int4-g32", "mixed")

CHILD = """
import json, sys
from harmony_ref.eval.embedding import evaluate
from harmony_ref.metrics import NUMERICAL
out = {}
for policy in sys.argv[1:]:
    m = evaluate(policy)
    out[policy] = {x.name: x.value for x in m if x.kind == NUMERICAL}
print(json.dumps(out))
"""

CHILD_LM = """
import json, sys
from harmony_ref.eval.lm_accuracy import lm_accuracy, lm_metrics, variant_name
from harmony_ref.metrics import NUMERICAL
from harmony_ref.quant.policy import load_policy
variants = [(p, "fp16") for p in sys.argv[1:]]
acc = lm_accuracy("smollm2-135m", variants, max_chunks=2, use_cache=False)
out = {}
for p, kv in variants:
    m = lm_metrics(acc, variant_name(load_policy(p), kv))
    out[p] = {x.name: x.value for x in m if x.kind == NUMERICAL}
print(json.dumps(out))
"""


def measure(name: str, env: dict, child: str, policies) -> dict:
    full = {**os.environ, **env}
    r = subprocess.run(
        [sys.executable, "-c", child, *policies], env=full, capture_output=True, text=True
    )
    if r.returncode != 0:
        raise SystemExit(f"{name}: failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def cpu_label() -> str:
    """This host's CPU, short: 'AMD EPYC f25m1' (model name, family, model)."""
    from harmony_ref._cpus import cpu_model, cpuinfo

    return f"{cpu_model()} f{cpuinfo('cpu family') or '?'}m{cpuinfo('model') or '?'}"


def spread_table(values: dict) -> list[dict]:
    """values[config][policy][metric] -> rows: metric, policy, machines (the configurations
    that measured the policy), min, max, spread % of |max| and the absolute spread max - min (in
    the metric's unit)."""
    rows = []
    policies = dict.fromkeys(p for per in values.values() for p in per)
    for policy in policies:
        having = [c for c in values if policy in values[c]]
        for metric in values[having[0]][policy]:
            xs = [values[c][policy][metric] for c in having]
            lo, hi = min(xs), max(xs)
            scale = max(abs(lo), abs(hi))
            rows.append(
                {
                    "metric": metric,
                    "policy": policy,
                    "machines": len(xs),
                    "min": lo,
                    "max": hi,
                    "spread_pct": 100.0 * (hi - lo) / scale if scale else 0.0,
                    "spread_abs": hi - lo,
                }
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the measurement (every value, the table) as JSON here")
    ap.add_argument("--configs", help="comma-separated subset of harmony_ref/_cpus.py's names")
    ap.add_argument(
        "--merge",
        metavar="JSON",
        help="a measurement from another host (an earlier --out): its values join "
        "this run's, keyed HOST/CONFIG, so the spread spans both CPUs",
    )
    ap.add_argument(
        "--lm",
        action="store_true",
        help="the decoder's lm_* metrics (SmolLM2-135M) instead of MiniLM's",
    )
    args = ap.parse_args()
    values, configs = {}, {}
    host = host_features()
    for cfg in by_name(args.configs):
        try:
            env = environment(cfg, host)
        except Unemulable as e:
            print(f"{cfg.name}: skipped ({e})", file=sys.stderr, flush=True)
            continue
        values[cfg.name] = measure(
            cfg.name, env, CHILD_LM if args.lm else CHILD, LM_POLICIES if args.lm else POLICIES
        )
        configs[cfg.name] = {k: v for k, v in env.items() if k != "NUMBA_CPU_FEATURES"}
        print(f"{cfg.name}: done", file=sys.stderr, flush=True)
    here = cpu_label()
    values = {f"{here}/{k}": v for k, v in values.items()}
    configs = {f"{here}/{k}": v for k, v in configs.items()}
    if args.merge:
        with open(args.merge) as f:
            old = json.load(f)
        values = {**old["values"], **values}
        configs = {**old["configs"], **configs}
    rows = spread_table(values)
    print(f"{'metric':<24}{'policy':<14}{'min':>12}{'max':>12}{'spread %':>10}")
    for r in rows:
        print(
            f"{r['metric']:<24}{r['policy']:<14}{r['min']:>12.6f}{r['max']:>12.6f}"
            f"{r['spread_pct']:>10.4f}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"configs": configs, "values": values, "spread": rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
