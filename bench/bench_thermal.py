"""asv benchmarks for the thermal stepper: one simulated hour at 10 ms (360k steps) per call.
The time per step is this time / 360k; the stepper's speed is tracked by the time itself, with
asv's samples (a steps-per-second track_ would be one unsampled, higher-is-better number)."""

import numpy as np

from harmony_ref.device.thermal import GOVERNOR_CODES, _simulate_core, pack_params
from harmony_ref.device.thermal_config import ThermalConfig

from .common import Timed

HOUR_STEPS = 360_000
STEPS = (1.0, 0.85, 0.7, 0.55, 0.4)


def _cfg(governor):
    return ThermalConfig(
        governor=governor, ambient_c=25.0, die_to_skin_k_per_w=3.0, skin_to_ambient_k_per_w=9.0,
        die_heat_capacity_j_per_k=2.0, skin_heat_capacity_j_per_k=40.0, static_power_w=0.3,
        energy_per_int8_op_pj=0.5, energy_per_dram_byte_pj=20.0, freq_steps=STEPS,
        passive_trip_c=65.0, critical_trip_c=75.0, sustainable_power_w=2.5)


class ThermalStepper(Timed):
    params = (["off", "step_wise", "power_allocator"],)
    param_names = ["governor"]

    def setup(self, governor):
        self.prm = pack_params(_cfg("step_wise" if governor == "off" else governor))
        self.power = 0.3 + 5.7 * np.asarray(STEPS) ** 2
        self.out = (np.empty(HOUR_STEPS), np.empty(HOUR_STEPS), np.empty(HOUR_STEPS, np.int32))
        self.code = GOVERNOR_CODES[governor]
        _simulate_core(self.power, 10, 0.01, self.code, self.prm, *self.out)  # compile

    def time_simulate_hour_10ms(self, governor):
        _simulate_core(self.power, HOUR_STEPS, 0.01, self.code, self.prm, *self.out)
