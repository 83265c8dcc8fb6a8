"""pytest-benchmark: steps per second of the Numba RC + governor stepper (target >= 5 million).

Run: /work/venv/bin/python -m pytest tests/perf/test_perf_thermal.py --benchmark-enable
One hour of simulated use at 10 ms steps is 360k steps; the compile happens in setup."""

import numpy as np
import pytest

from harmony_ref.device.thermal import GOVERNOR_CODES, _simulate_core, pack_params, simulate_ref
from tests.test_thermal import make_cfg, workload

HOUR_STEPS = 360_000
DT_S = 0.01


@pytest.mark.parametrize("governor", ["off", "step_wise", "power_allocator"])
def test_perf_thermal_steps_per_s(benchmark, governor):
    cfg = make_cfg(governor="step_wise" if governor == "off" else governor)
    power, _rate = workload()
    prm = pack_params(cfg)
    die, skin, state = np.empty(HOUR_STEPS), np.empty(HOUR_STEPS), np.empty(HOUR_STEPS, np.int32)
    code = GOVERNOR_CODES[governor]
    _simulate_core(power, 10, DT_S, code, prm, die, skin, state)  # compile outside the timing
    benchmark(_simulate_core, power, HOUR_STEPS, DT_S, code, prm, die, skin, state)
    if benchmark.stats:  # None with --benchmark-disable
        benchmark.extra_info["steps_per_s"] = HOUR_STEPS / benchmark.stats["median"]
    assert np.isfinite(die).all()


def test_perf_thermal_ref_steps_per_s(benchmark):
    cfg = make_cfg()
    power, _rate = workload()
    n = 2000  # the Python reference is ~1000x slower; a short run is enough for the ratio
    benchmark(simulate_ref, power, n, DT_S, GOVERNOR_CODES["step_wise"], pack_params(cfg))
    if benchmark.stats:
        benchmark.extra_info["steps_per_s"] = n / benchmark.stats["median"]
