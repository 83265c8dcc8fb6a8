"""The [thermal] section of a device profile: a two-node RC model (die, skin/case) plus a
governor. Read by harmony_ref/device/thermal.py. Every number in a shipped profile names its source
or says `assumption` in a comment beside it."""

from __future__ import annotations

from dataclasses import dataclass, field

GOVERNORS = ("step_wise", "power_allocator")


@dataclass(frozen=True)
class ThermalConfig:
    governor: str = field(metadata={"choices": GOVERNORS})
    ambient_c: float = field(metadata={"min": -40.0, "max": 60.0})
    # RC network: die -> skin -> ambient (K/W and J/K).
    die_to_skin_k_per_w: float = field(metadata={"min": 1e-9})
    skin_to_ambient_k_per_w: float = field(metadata={"min": 1e-9})
    die_heat_capacity_j_per_k: float = field(metadata={"min": 1e-9})
    skin_heat_capacity_j_per_k: float = field(metadata={"min": 1e-9})
    # Power: static + energy per op + energy per DRAM byte; dynamic energy per op scales with
    # the square of the frequency fraction (V roughly tracks f in the DVFS range).
    static_power_w: float = field(metadata={"min": 0.0})
    energy_per_int8_op_pj: float = field(metadata={"min": 0.0})
    energy_per_dram_byte_pj: float = field(metadata={"min": 0.0})
    # Governor: discrete frequency steps (fractions of peak, descending from 1.0), trip points.
    freq_steps: tuple[float, ...] = field(metadata={"min": 0.01, "max": 1.0})
    passive_trip_c: float = field(metadata={"min": 0.0})  # step-wise starts; IPA switch_on
    critical_trip_c: float = field(
        metadata={"min": 0.0}
    )  # step-wise: lowest step forced; IPA control temp
    sustainable_power_w: float = field(metadata={"min": 1e-9})  # IPA's budget at the control trip
    skin_limit_c: float = field(default=45.0, metadata={"min": 0.0})
    # IPA PID gains (Linux docs: k_po, k_pu derived from sustainable power when absent).
    k_i: float = field(default=10.0, metadata={"min": 0.0})
    k_d: float = field(default=0.0, metadata={"min": 0.0})
    polling_ms: float = field(default=100.0, metadata={"min": 1.0})

    def __post_init__(self):
        steps = self.freq_steps
        if not steps or steps[0] != 1.0 or any(b >= a for a, b in zip(steps, steps[1:])):
            raise ValueError(
                f"thermal.freq_steps = {list(steps)}: must start at 1.0 and strictly descend"
            )
        if self.critical_trip_c <= self.passive_trip_c:
            raise ValueError(
                f"thermal.critical_trip_c = {self.critical_trip_c} must exceed "
                f"thermal.passive_trip_c = {self.passive_trip_c}"
            )
