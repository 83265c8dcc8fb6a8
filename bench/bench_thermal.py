"""asv benchmarks for the thermal stepper: the Numba stepper's CPU time on 20,000 steps relative
to common.numba_probe, a fixed compiled scalar recurrence timed in the same seconds
(common.relative_time says why a ratio and not a time). Not relative to its plain-Python twin
`simulate_ref`: compiled code and the interpreter speed up and slow down apart on this machine
(common.numba_probe), which moved that ratio by up to 1.5x between runs of unchanged code."""

import numpy as np

from harmony_ref.device.thermal import GOVERNOR_CODES, _simulate_core, pack_params
from harmony_ref.device.thermal_config import ThermalConfig

from .common import numba_probe, relative_time, tracks

STEPS = (1.0, 0.85, 0.7, 0.55, 0.4)
N_STEPS = 20_000  # about 0.2 ms


def _cfg(governor):
    return ThermalConfig(
        governor=governor,
        ambient_c=25.0,
        die_to_skin_k_per_w=3.0,
        skin_to_ambient_k_per_w=9.0,
        die_heat_capacity_j_per_k=2.0,
        skin_heat_capacity_j_per_k=40.0,
        static_power_w=0.3,
        energy_per_int8_op_pj=0.5,
        energy_per_dram_byte_pj=20.0,
        freq_steps=STEPS,
        passive_trip_c=65.0,
        critical_trip_c=75.0,
        sustainable_power_w=2.5,
    )


class ThermalStepper:
    params = (["off", "step_wise", "power_allocator"],)
    param_names = ["governor"]

    def setup(self, governor):
        self.prm = pack_params(_cfg("step_wise" if governor == "off" else governor))
        self.power = 0.3 + 5.7 * np.asarray(STEPS) ** 2
        self.out = (np.empty(N_STEPS), np.empty(N_STEPS), np.empty(N_STEPS, np.int32))
        self.code = GOVERNOR_CODES[governor]

    @tracks(None, unit="x compiled probe time", direction="lower")
    def track_step_time_vs_numba_probe(self, governor):
        return relative_time(
            lambda: _simulate_core(self.power, N_STEPS, 0.01, self.code, self.prm, *self.out),
            numba_probe,
        )
