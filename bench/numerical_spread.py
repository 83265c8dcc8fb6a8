"""Spread of the `numerical` metrics (accuracy computed with float kernels) across emulated
machines: the measurement the gate's numerical tolerance is derived from.

Each configuration is a fresh process with environment variables that change the code the float
kernels run, as another x86-64 CPU or library build would:
- NUMBA_CPU_NAME / NUMBA_CPU_FEATURES: Numba's target CPU (generic, haswell, skylake-avx512,
  icelake-server, znver3): vector width and FMA use, hence the summation order;
- OPENBLAS_CORETYPE: OpenBLAS's kernels (Prescott, Haswell, SkylakeX, Zen, SapphireRapids);
- HARMONY_REF_MATMUL_ISA: the int8 dot-product matmul path (portable, avx2, avxvnni, avx512vnni);
- NUMBA_NUM_THREADS / OMP/OPENBLAS threads: 1 and 2.

    python bench/numerical_spread.py --out harmony_ref/data/numerical_spread.json
    python bench/numerical_spread.py --lm --out harmony_ref/data/lm_numerical_spread.json

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

POLICIES = ("int4-g128", "int8")

# name -> environment: each emulates one machine (target CPU, BLAS kernels, matmul path, threads)
CONFIGS = {
    "native-2t": {},
    "native-1t": {"NUMBA_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
    "generic-portable": {"NUMBA_CPU_NAME": "generic", "OPENBLAS_CORETYPE": "Prescott",
                         "HARMONY_REF_MATMUL_ISA": "portable"},
    "haswell": {"NUMBA_CPU_NAME": "haswell", "OPENBLAS_CORETYPE": "Haswell",
                "HARMONY_REF_MATMUL_ISA": "avx2"},
    "icelake-vnni-1t": {"NUMBA_CPU_NAME": "icelake-server", "OPENBLAS_CORETYPE": "SkylakeX",
                        "HARMONY_REF_MATMUL_ISA": "avx512vnni", "NUMBA_NUM_THREADS": "1",
                        "OPENBLAS_NUM_THREADS": "1"},
    "znver3": {"NUMBA_CPU_NAME": "znver3", "OPENBLAS_CORETYPE": "Zen",
               "HARMONY_REF_MATMUL_ISA": "avx2"},
}

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


def measure(name: str, env: dict, child: str = CHILD) -> dict:
    full = {**os.environ, **env}
    r = subprocess.run([sys.executable, "-c", child, *POLICIES], env=full, capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise SystemExit(f"{name}: failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def spread_table(values: dict) -> list[dict]:
    """values[config][policy][metric] -> rows: metric, policy, min, max, spread % of |max|."""
    rows = []
    configs = list(values)
    for policy in POLICIES:
        for metric in values[configs[0]][policy]:
            xs = [values[c][policy][metric] for c in configs]
            lo, hi = min(xs), max(xs)
            scale = max(abs(lo), abs(hi))
            rows.append({"metric": metric, "policy": policy, "min": lo, "max": hi,
                         "spread_pct": 100.0 * (hi - lo) / scale if scale else 0.0})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the measurement (every value, the table) as JSON here")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset")
    ap.add_argument("--lm", action="store_true",
                    help="the decoder's lm_* metrics (SmolLM2-135M) instead of MiniLM's")
    args = ap.parse_args()
    values = {}
    for name in args.configs.split(","):
        values[name] = measure(name, CONFIGS[name], CHILD_LM if args.lm else CHILD)
        print(f"{name}: done", file=sys.stderr, flush=True)
    rows = spread_table(values)
    print(f"{'metric':<24}{'policy':<14}{'min':>12}{'max':>12}{'spread %':>10}")
    for r in rows:
        print(f"{r['metric']:<24}{r['policy']:<14}{r['min']:>12.6f}{r['max']:>12.6f}"
              f"{r['spread_pct']:>10.4f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"configs": CONFIGS, "values": values, "spread": rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
