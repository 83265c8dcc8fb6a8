"""Thermal model: a two-node RC network (die -> skin -> ambient) driven by the power a workload
draws, and the two Linux thermal governors that throttle the NPU through discrete frequency steps.

Layers, top to bottom:
- `simulate(cfg, power_w, rate, duration_s)`: the entry point; returns a `ThermalTrace`.
- `_simulate_core` (Numba, `cache=True`) and `simulate_ref` (plain NumPy/Python loops) step the
  same model and are held equal by tests/device/test_thermal.py.
- `sustained_generation` / `thermal_summary` (further down) drive the model with back-to-back
  decode, using the device cost model for time, ops and bytes per token at each frequency step.

The RC network (backward Euler, unconditionally stable, exact steady state):
    C_die  dT_die/dt  = P - (T_die - T_skin) / R_ds
    C_skin dT_skin/dt = (T_die - T_skin) / R_ds - (T_skin - T_amb) / R_sa
so at constant P the die settles at T_amb + P * (R_ds + R_sa).

Cooling states follow Linux's convention: state 0 is full frequency, higher states are slower
(`freq_steps[s]`). Two thermal zones share the one cooling device (the NPU + memory clock):
the die zone and a skin zone (phones throttle on a virtual skin sensor); as in Linux, the device
runs at the deepest state any zone asks for.

Governors (re-evaluated every `polling_ms`, the kernel's passive polling delay):
- step_wise (drivers/thermal/gov_step_wise.c): at or above a trip and rising -> one state deeper;
  at or above and falling -> hold; below the trip and falling -> one state shallower, down to
  state 0. Die trip = `passive_trip_c`, skin trip = `skin_limit_c`; at `critical_trip_c`
  the deepest state is forced. Trip hysteresis is not modelled.
- power_allocator (Documentation/driver-api/thermal/power_allocator.rst): a PID on
  e = control_temp - temp produces a power budget
      P_max = sustainable_power + k_p * e + k_i * sum(e) + k_d * diff(e)
  with k_pu = 2 * sustainable_power / (control - switch_on) while below the control temperature
  and k_po = sustainable_power / (control - switch_on) above it (the docs' derivation: at the
  switch-on temperature the proportional term is 2x sustainable power, at the control
  temperature zero, so the budget there is exactly the sustainable power). The integral only
  accumulates while e < 0 (the kernel's default integral_cutoff of 0) and is bounded by the
  maximum power; below switch-on the governor resets and grants maximum power. The budget is turned into the fastest state whose power fits (the
  devfreq cooling device's power2state). Die zone: switch_on = `passive_trip_c`, control =
  `critical_trip_c` (a HiSilicon tree uses 65 and 75 C). Skin zone: control = `skin_limit_c`,
  switch-on the same window below it (assumption). One PID runs on the tighter of the two
  errors, so the more constrained zone steers.
  `k_i` and `k_d` are in the kernel's sysfs units: 10-bit fixed point in mW per milli-degree,
  so the kernel default k_i = 10 means 10/1024 W per K per poll.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numba
import numpy as np

from harmony_ref.device.thermal_config import ThermalConfig
from harmony_ref.units import MS_PER_S

if TYPE_CHECKING:  # annotations only; imported where used
    from harmony_ref.metrics import Metrics

GOV_OFF = 0
GOV_STEP_WISE = 1
GOV_POWER_ALLOCATOR = 2
GOVERNOR_CODES = {
    "off": GOV_OFF,
    "step_wise": GOV_STEP_WISE,
    "power_allocator": GOV_POWER_ALLOCATOR,
}
KERNEL_FRAC_SCALE = 1024.0  # FRAC_BITS = 10 in gov_power_allocator.c
DEFAULT_DT_S = 0.010
# Bound on one run (a day at the default 10 ms step): the trace keeps ~6 float64 arrays of n,
# so an absurd --minutes fails with a message instead of a MemoryError.
MAX_STEPS = 8_640_000

# Packed parameter vector shared by the Numba core and the reference (indices named once).
P_R_DS, P_R_SA, P_C_DIE, P_C_SKIN, P_AMBIENT = 0, 1, 2, 3, 4
P_PASSIVE, P_CRITICAL, P_SKIN_LIMIT, P_SUSTAINABLE = 5, 6, 7, 8
P_K_I, P_K_D, P_POLL_MS, P_T0_DIE, P_T0_SKIN = 9, 10, 11, 12, 13
N_PARAMS = 14


def pack_params(
    cfg: ThermalConfig, t0_die_c: float | None = None, t0_skin_c: float | None = None
) -> np.ndarray:
    """The float64 parameter vector the steppers read; starting temperatures default to ambient."""
    p = np.zeros(N_PARAMS)
    p[P_R_DS] = cfg.die_to_skin_k_per_w
    p[P_R_SA] = cfg.skin_to_ambient_k_per_w
    p[P_C_DIE] = cfg.die_heat_capacity_j_per_k
    p[P_C_SKIN] = cfg.skin_heat_capacity_j_per_k
    p[P_AMBIENT] = cfg.ambient_c
    p[P_PASSIVE] = cfg.passive_trip_c
    p[P_CRITICAL] = cfg.critical_trip_c
    p[P_SKIN_LIMIT] = cfg.skin_limit_c
    p[P_SUSTAINABLE] = cfg.sustainable_power_w
    p[P_K_I] = cfg.k_i / KERNEL_FRAC_SCALE
    p[P_K_D] = cfg.k_d / KERNEL_FRAC_SCALE
    p[P_POLL_MS] = cfg.polling_ms
    p[P_T0_DIE] = cfg.ambient_c if t0_die_c is None else t0_die_c
    p[P_T0_SKIN] = cfg.ambient_c if t0_skin_c is None else t0_skin_c
    return p


@numba.njit(cache=True)
def _step_wise_target(temp, prev_temp, trip, target, deepest):
    # gov_step_wise.c get_target_state() (v5.x+): trend from the last poll, one state per poll;
    # above the trip a falling temperature holds the state, only below it does cooling ease.
    if temp >= trip:
        if temp > prev_temp:
            return min(target + 1, deepest)
        return target
    if temp < prev_temp:
        return max(target - 1, 0)
    return target


@numba.njit(cache=True)
def _simulate_core(power_w, n_steps, dt_s, governor, prm, die_out, skin_out, state_out):
    """Step the RC model and the governor n_steps times; writes die/skin temperature (C) and the
    cooling state after each step. power_w[s]: device power in state s (W), state 0 fastest."""
    deepest = power_w.shape[0] - 1
    g1 = 1.0 / prm[P_R_DS]
    g2 = 1.0 / prm[P_R_SA]
    a11 = prm[P_C_DIE] / dt_s + g1
    a22 = prm[P_C_SKIN] / dt_s + g1 + g2
    det = a11 * a22 - g1 * g1
    cd_dt = prm[P_C_DIE] / dt_s
    cs_dt = prm[P_C_SKIN] / dt_s
    amb_term = g2 * prm[P_AMBIENT]
    poll = max(1, int(round(prm[P_POLL_MS] / (dt_s * MS_PER_S))))
    passive = prm[P_PASSIVE]
    critical = prm[P_CRITICAL]
    skin_limit = prm[P_SKIN_LIMIT]
    window = critical - passive
    skin_switch_on = skin_limit - window
    sustainable = prm[P_SUSTAINABLE]
    k_pu = 2.0 * sustainable / window
    k_po = sustainable / window
    k_i = prm[P_K_I]
    k_d = prm[P_K_D]
    max_power = power_w[0]

    t_die = prm[P_T0_DIE]
    t_skin = prm[P_T0_SKIN]
    prev_die = t_die
    prev_skin = t_skin
    die_target = 0
    skin_target = 0
    state = 0
    integral = 0.0
    prev_err = 0.0
    for n in range(n_steps):
        p = power_w[state]
        r1 = cd_dt * t_die + p
        r2 = cs_dt * t_skin + amb_term
        new_die = (a22 * r1 + g1 * r2) / det
        t_skin = (a11 * r2 + g1 * r1) / det
        t_die = new_die
        if governor != GOV_OFF and (n + 1) % poll == 0:
            if governor == GOV_STEP_WISE:
                die_target = _step_wise_target(t_die, prev_die, passive, die_target, deepest)
                skin_target = _step_wise_target(t_skin, prev_skin, skin_limit, skin_target, deepest)
                state = max(die_target, skin_target)
                if t_die >= critical:
                    state = deepest
                    die_target = deepest
            else:
                if t_die < passive and t_skin < skin_switch_on:
                    integral = 0.0
                    prev_err = 0.0
                    state = 0
                else:
                    err = min(critical - t_die, skin_limit - t_skin)
                    kp = k_po if err < 0.0 else k_pu
                    if err < 0.0:
                        i_next = integral + k_i * err
                        if abs(i_next) < max_power:
                            integral = i_next
                    d = k_d * (err - prev_err) / prm[P_POLL_MS]
                    prev_err = err
                    budget = sustainable + kp * err + integral + d
                    budget = min(max(budget, 0.0), max_power)
                    state = deepest
                    for s in range(deepest + 1):
                        if power_w[s] <= budget:
                            state = s
                            break
            prev_die = t_die
            prev_skin = t_skin
        die_out[n] = t_die
        skin_out[n] = t_skin
        state_out[n] = state


def simulate_ref(power_w, n_steps, dt_s, governor, prm):
    """Plain-Python twin of `_simulate_core` (same algorithm, no Numba): returns
    (die_c, skin_c, state) arrays. Slow; for tests on short runs."""
    power_w = np.asarray(power_w, dtype=np.float64)
    deepest = len(power_w) - 1
    die_out = np.empty(n_steps)
    skin_out = np.empty(n_steps)
    state_out = np.empty(n_steps, dtype=np.int32)
    r_ds, r_sa = prm[P_R_DS], prm[P_R_SA]
    c_die, c_skin, amb = prm[P_C_DIE], prm[P_C_SKIN], prm[P_AMBIENT]
    # Backward Euler as a 2x2 linear solve: A @ T_next = C/dt * T + [P, T_amb / R_sa].
    a = np.array(
        [[c_die / dt_s + 1 / r_ds, -1 / r_ds], [-1 / r_ds, c_skin / dt_s + 1 / r_ds + 1 / r_sa]]
    )
    poll = max(1, int(round(prm[P_POLL_MS] / (dt_s * MS_PER_S))))
    passive, critical, skin_limit = prm[P_PASSIVE], prm[P_CRITICAL], prm[P_SKIN_LIMIT]
    window = critical - passive
    sustainable = prm[P_SUSTAINABLE]
    t = np.array([prm[P_T0_DIE], prm[P_T0_SKIN]])
    prev = t.copy()
    targets = [0, 0]
    state, integral, prev_err = 0, 0.0, 0.0

    def step_wise(temp, prev_temp, trip, target):
        if temp >= trip:
            return min(target + 1, deepest) if temp > prev_temp else target
        return max(target - 1, 0) if temp < prev_temp else target

    for n in range(n_steps):
        rhs = np.array([c_die / dt_s * t[0] + power_w[state], c_skin / dt_s * t[1] + amb / r_sa])
        t = np.linalg.solve(a, rhs)
        if governor != GOV_OFF and (n + 1) % poll == 0:
            if governor == GOV_STEP_WISE:
                targets[0] = step_wise(t[0], prev[0], passive, targets[0])
                targets[1] = step_wise(t[1], prev[1], skin_limit, targets[1])
                state = max(targets)
                if t[0] >= critical:
                    state = targets[0] = deepest
            elif t[0] < passive and t[1] < skin_limit - window:
                integral, prev_err, state = 0.0, 0.0, 0
            else:
                err = min(critical - t[0], skin_limit - t[1])
                kp = sustainable / window if err < 0 else 2 * sustainable / window
                if err < 0 and abs(integral + prm[P_K_I] * err) < power_w[0]:
                    integral += prm[P_K_I] * err
                d = prm[P_K_D] * (err - prev_err) / prm[P_POLL_MS]
                prev_err = err
                budget = np.clip(sustainable + kp * err + integral + d, 0.0, power_w[0])
                fits = np.nonzero(power_w <= budget)[0]
                state = int(fits[0]) if len(fits) else deepest
            prev = t.copy()
        die_out[n], skin_out[n], state_out[n] = t[0], t[1], state
    return die_out, skin_out, state_out


@dataclass(frozen=True)
class ThermalTrace:
    """One simulated run, sampled every dt_s. `state` indexes the power/rate arrays."""

    dt_s: float
    die_c: np.ndarray  # (n,) float64
    skin_c: np.ndarray  # (n,) float64
    state: np.ndarray  # (n,) int32
    freq_fraction: np.ndarray  # (n,) float64, freq_steps[state]
    power_w: np.ndarray  # (n,) float64
    rate: np.ndarray  # (n,) float64, work per second (decode tokens/s) in each step

    @property
    def time_s(self) -> np.ndarray:
        return (np.arange(len(self.die_c)) + 1) * self.dt_s

    def time_to_first_throttle_s(self) -> float:
        """Seconds until the governor first leaves state 0; inf if it never does."""
        idx = np.nonzero(self.state > 0)[0]
        return float((idx[0] + 1) * self.dt_s) if len(idx) else float("inf")


def simulate(
    cfg: ThermalConfig,
    power_w,
    rate,
    duration_s: float,
    dt_s: float = DEFAULT_DT_S,
    governor: str | None = None,
    t0_die_c: float | None = None,
    t0_skin_c: float | None = None,
) -> ThermalTrace:
    """Run the model for `duration_s`. power_w[s], rate[s]: device power and throughput at each
    frequency step of cfg.freq_steps (state 0 = 1.0). governor: None -> cfg.governor, or "off"."""
    power_w = np.ascontiguousarray(power_w, dtype=np.float64)
    rate = np.ascontiguousarray(rate, dtype=np.float64)
    if power_w.shape != (len(cfg.freq_steps),) or rate.shape != power_w.shape:
        raise ValueError(
            f"power_w and rate need one value per freq step ({len(cfg.freq_steps)}), "
            f"got {power_w.shape} and {rate.shape}"
        )
    if not (np.all(np.isfinite(power_w)) and np.all(power_w >= 0)):
        raise ValueError(f"power_w must be finite and >= 0, got {power_w.tolist()}")
    if dt_s <= 0 or duration_s <= 0:
        raise ValueError(f"dt_s = {dt_s} and duration_s = {duration_s} must be > 0")
    name = cfg.governor if governor is None else governor
    if name not in GOVERNOR_CODES:
        raise ValueError(f"governor = {name!r}: must be one of {list(GOVERNOR_CODES)}")
    n = int(round(duration_s / dt_s))
    if not 1 <= n <= MAX_STEPS:
        raise ValueError(
            f"duration_s = {duration_s} at dt_s = {dt_s} is {n} steps: must be 1..{MAX_STEPS}"
        )
    die = np.empty(n)
    skin = np.empty(n)
    state = np.empty(n, dtype=np.int32)
    _simulate_core(
        power_w,
        n,
        dt_s,
        GOVERNOR_CODES[name],
        pack_params(cfg, t0_die_c, t0_skin_c),
        die,
        skin,
        state,
    )
    steps = np.asarray(cfg.freq_steps)
    return ThermalTrace(dt_s, die, skin, state, steps[state], power_w[state], rate[state])


def steady_state_die_c(cfg: ThermalConfig, power_w: float) -> float:
    """Die temperature at constant power with no throttling: ambient + P * (R_ds + R_sa)."""
    return cfg.ambient_c + power_w * (cfg.die_to_skin_k_per_w + cfg.skin_to_ambient_k_per_w)


# ----------------------------------------------------------------------------------------------
# Sustained generation: back-to-back decode on a device profile.

J_PER_PJ = 1e-12
MJ_PER_J = 1e3
SUSTAINED_AT_S = 600.0  # "sustained" is read at 10 minutes
SUSTAINED_WINDOW_S = 30.0  # averaged over the 30 s before it (the governor dithers between steps)
SERIES_BUCKET_S = 10.0


@dataclass(frozen=True)
class DecodeOperatingPoints:
    """Decode at each frequency step: time per step, device power, tokens per step."""

    freq_steps: np.ndarray
    step_s: np.ndarray
    power_w: np.ndarray
    tokens_per_s: np.ndarray


def decode_operating_points(profile, config) -> DecodeOperatingPoints:
    """Cost one decode step at every freq step (NPU and DDR clocks scaled together) and turn it
    into power: static + int8-equivalent ops x energy x f^2 (V tracks f) + DRAM bytes x energy."""
    from harmony_ref.device.cost import phase_cost

    th = profile.thermal
    steps = np.asarray(th.freq_steps, dtype=np.float64)
    step_s, power, rate = [], [], []
    for f in steps:
        c = phase_cost(profile, config, "decode", float(f), float(f))
        dyn_j = (
            c.int8_equiv_ops * th.energy_per_int8_op_pj * f**2
            + c.dram_bytes * th.energy_per_dram_byte_pj
        ) * J_PER_PJ
        step_s.append(c.time_s)
        power.append(th.static_power_w + dyn_j / c.time_s)
        rate.append(c.tokens / c.time_s)
    return DecodeOperatingPoints(steps, np.array(step_s), np.array(power), np.array(rate))


@dataclass(frozen=True)
class SustainedResult:
    points: DecodeOperatingPoints
    trace: ThermalTrace
    governor: str

    @property
    def peak_tokens_per_s(self) -> float:
        return float(self.points.tokens_per_s[0])

    def tokens_per_s_at(self, t_s: float, window_s: float = SUSTAINED_WINDOW_S) -> float:
        """Mean decode tokens/s over (t - window, t]."""
        t = self.trace.time_s
        sel = (t > t_s - window_s) & (t <= t_s + 1e-9)
        if not sel.any():
            raise ValueError(f"t = {t_s} s is outside the simulated {t[-1]:.0f} s")
        return float(self.trace.rate[sel].mean())

    def summary(self) -> dict:
        tr = self.trace
        tokens = float(tr.rate.sum() * tr.dt_s)
        energy_j = float(tr.power_w.sum() * tr.dt_s)
        duration = tr.time_s[-1]
        # None when the run is shorter than 10 minutes (nothing to read there).
        at_10 = self.tokens_per_s_at(SUSTAINED_AT_S) if duration >= SUSTAINED_AT_S - 1e-9 else None
        return {
            "governor": self.governor,
            "peak_tokens_per_s": self.peak_tokens_per_s,
            "sustained_tokens_per_s_10min": at_10,
            "sustained_peak_ratio_10min": None if at_10 is None else at_10 / self.peak_tokens_per_s,
            "final_tokens_per_s": self.tokens_per_s_at(duration),
            "time_to_first_throttle_s": tr.time_to_first_throttle_s(),
            "peak_die_c": float(tr.die_c.max()),
            "peak_skin_c": float(tr.skin_c.max()),
            "peak_power_w": float(self.points.power_w[0]),
            "mean_power_w": energy_j / duration,
            "energy_per_token_mj": energy_j / tokens * MJ_PER_J,
            "tokens_generated": tokens,
            "duration_s": float(duration),
        }

    def series(self, bucket_s: float = SERIES_BUCKET_S) -> dict[str, np.ndarray]:
        """Bucketed means: time_s (bucket end), tokens_per_s, die_c, skin_c, freq_fraction."""
        tr = self.trace
        per = max(1, int(round(bucket_s / tr.dt_s)))
        n = len(tr.die_c) // per
        cut = n * per

        def bucket(a):
            return a[:cut].reshape(n, per).mean(axis=1)

        return {
            "time_s": (np.arange(n) + 1) * per * tr.dt_s,
            "tokens_per_s": bucket(tr.rate),
            "die_c": bucket(tr.die_c),
            "skin_c": bucket(tr.skin_c),
            "freq_fraction": bucket(tr.freq_fraction),
        }


def sustained_generation(
    profile, config, minutes: float = 30.0, dt_s: float = DEFAULT_DT_S, governor: str | None = None
) -> SustainedResult:
    """Back-to-back decode for `minutes` from ambient, throttled by the profile's governor."""
    from harmony_ref.device.runtime import load_profile

    if not minutes > 0:
        raise ValueError(f"minutes = {minutes}: must be > 0")
    profile = load_profile(profile)  # a DeviceProfile, a shipped name or a .toml path
    pts = decode_operating_points(profile, config)
    trace = simulate(profile.thermal, pts.power_w, pts.tokens_per_s, minutes * 60.0, dt_s, governor)
    return SustainedResult(pts, trace, governor or profile.thermal.governor)


def thermal_summary(profile, config, minutes: float = 10.0) -> Metrics:
    """The standard thermal metrics (all exact): sustained_peak_ratio_10min,
    time_to_first_throttle_s, peak_die_c, peak_skin_c, energy_per_token_mj."""
    from harmony_ref.metrics import Metrics

    if minutes * 60.0 < SUSTAINED_AT_S:
        raise ValueError(f"minutes = {minutes}: the 10-minute ratio needs a run of >= 10 minutes")
    s = sustained_generation(profile, config, minutes).summary()
    m = Metrics()
    m.add(
        "sustained_peak_ratio_10min",
        s["sustained_peak_ratio_10min"],
        "ratio",
        "higher",
        description=f"decode tokens/s over the {SUSTAINED_WINDOW_S:.0f} s before 10 min / peak",
    )
    # Never throttling is reported as the simulated span (a finite number for the gate).
    throttle_s = s["time_to_first_throttle_s"]
    never = not np.isfinite(throttle_s)
    m.add(
        "time_to_first_throttle_s",
        s["duration_s"] if never else throttle_s,
        "s",
        "higher",
        description="never throttled within the run" if never else "",
    )
    m.add("peak_die_c", s["peak_die_c"], "C", "lower")
    m.add("peak_skin_c", s["peak_skin_c"], "C", "lower")
    m.add("energy_per_token_mj", s["energy_per_token_mj"], "mJ", "lower")
    return m
