"""pytest-benchmark: steps per second of the Numba RC + governor stepper (target >= 5 million).

Run: /work/venv/bin/python -m pytest tests/perf/test_perf_thermal.py --benchmark-enable
One hour of simulated use at 10 ms steps is 360k steps; the compile happens in setup. The perf
summary also gives the speed-up over the plain-Python reference `simulate_ref`, timed in the
same run on a short simulation."""

import statistics
import time

import numpy as np
import pytest

from harmony_ref.device.thermal import GOVERNOR_CODES, _simulate_core, pack_params, simulate_ref
from harmony_ref.units import MS_PER_S
from tests.device.test_thermal import make_cfg, workload
from tests.perf.conftest import gate_relative, numba_probe

HOUR_STEPS = 360_000
REF_STEPS = 2_000  # the reference is ~500x slower; a short run is enough for its rate
REF_REPEATS = 3
DT_S = 0.01
TARGET_STEPS_PER_S = 5e6


@pytest.mark.parametrize("governor", ["off", "step_wise", "power_allocator"])
def test_perf_thermal_steps_per_s(benchmark, perf_summary, governor):
    cfg = make_cfg(governor="step_wise" if governor == "off" else governor)
    power, _rate = workload()
    prm = pack_params(cfg)
    die, skin, state = np.empty(HOUR_STEPS), np.empty(HOUR_STEPS), np.empty(HOUR_STEPS, np.int32)
    code = GOVERNOR_CODES[governor]
    _simulate_core(power, 10, DT_S, code, prm, die, skin, state)  # compile outside the timing
    benchmark(_simulate_core, power, HOUR_STEPS, DT_S, code, prm, die, skin, state)
    # gated against a compiled yardstick: against the pure-Python probe this ratio moved by up
    # to 50% between runs of unchanged code (bench/common.numba_probe says why)
    gate_relative(
        benchmark,
        lambda: _simulate_core(power, HOUR_STEPS, DT_S, code, prm, die, skin, state),
        numba_probe,
        "compiled probe",
    )
    assert np.isfinite(die).all()
    if not benchmark.stats:  # None with --benchmark-disable
        return
    steps_per_s = HOUR_STEPS / benchmark.stats["median"]
    ref_s = []
    for _ in range(REF_REPEATS):
        t0 = time.perf_counter()
        simulate_ref(power, REF_STEPS, DT_S, code, prm)
        ref_s.append(time.perf_counter() - t0)
    ref_steps_per_s = REF_STEPS / statistics.median(ref_s)
    benchmark.extra_info.update(steps_per_s=steps_per_s, ref_steps_per_s=ref_steps_per_s)
    perf_summary.append(
        {
            "benchmark": f"thermal stepper, {governor}",
            "hour_at_10ms_ms": benchmark.stats["median"] * MS_PER_S,
            "steps_per_s": steps_per_s,
            "vs_target": steps_per_s / TARGET_STEPS_PER_S,
            "vs_python_ref": steps_per_s / ref_steps_per_s,
        }
    )
