"""RC thermal model and governors: physics (steady state), governor behaviour, Numba vs reference."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harmony_ref.device.thermal import (
    GOV_OFF,
    GOV_POWER_ALLOCATOR,
    GOV_STEP_WISE,
    _simulate_core,
    pack_params,
    simulate,
    simulate_ref,
    steady_state_die_c,
)
from harmony_ref.device.thermal_config import ThermalConfig
from harmony_ref.kernels._testing import assert_within

STEADY_STATE_ABS_TOL_C = 1e-6  # backward Euler has the exact fixed point; only rounding remains
CORE_VS_REF_TEMP_TOL_C = 1e-9  # same algorithm, different float evaluation order (2x2 solve)
STEPS = (1.0, 0.85, 0.7, 0.55, 0.4)


def make_cfg(**kw) -> ThermalConfig:
    base = dict(
        governor="step_wise",
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
        skin_limit_c=45.0,
    )
    base.update(kw)
    return ThermalConfig(**base)


def workload(power_at_full=6.0, static=0.3):
    f = np.asarray(STEPS)
    power = static + (power_at_full - static) * f**2
    rate = 20.0 * f
    return power, rate


@pytest.mark.parametrize("power", [0.0, 0.7, 2.5, 8.0])
def test_steady_state_is_ambient_plus_p_times_r_total(power):
    cfg = make_cfg()
    tau_s = (cfg.die_heat_capacity_j_per_k + cfg.skin_heat_capacity_j_per_k) * (
        cfg.die_to_skin_k_per_w + cfg.skin_to_ambient_k_per_w
    )
    tr = simulate(
        cfg,
        np.full(len(STEPS), power),
        np.ones(len(STEPS)),
        duration_s=40 * tau_s,
        dt_s=0.05,
        governor="off",
    )
    expected_die = cfg.ambient_c + power * (cfg.die_to_skin_k_per_w + cfg.skin_to_ambient_k_per_w)
    assert steady_state_die_c(cfg, power) == pytest.approx(expected_die)
    assert abs(tr.die_c[-1] - expected_die) < STEADY_STATE_ABS_TOL_C, (tr.die_c[-1], expected_die)
    expected_skin = cfg.ambient_c + power * cfg.skin_to_ambient_k_per_w
    assert abs(tr.skin_c[-1] - expected_skin) < STEADY_STATE_ABS_TOL_C
    assert np.all(tr.state == 0)


def test_heating_is_monotone_and_bounded_without_governor():
    cfg = make_cfg()
    power, rate = workload()
    tr = simulate(cfg, power, rate, duration_s=600, governor="off")
    assert np.all(np.diff(tr.die_c) >= -1e-12)
    assert tr.die_c.max() <= steady_state_die_c(cfg, power[0]) + 1e-9


@pytest.mark.parametrize("governor", ["step_wise", "power_allocator"])
def test_throttling_never_raises_throughput(governor):
    cfg = make_cfg(governor=governor)
    power, rate = workload()
    free = simulate(cfg, power, rate, duration_s=900, governor="off")
    gov = simulate(cfg, power, rate, duration_s=900)
    assert np.all(gov.rate <= free.rate)
    assert gov.rate.sum() <= free.rate.sum()
    assert gov.state.max() > 0, "this workload (6 W) must throttle"
    assert gov.die_c.max() <= free.die_c.max() + 1e-9


def test_step_wise_moves_one_discrete_step_per_poll_above_trip():
    cfg = make_cfg(governor="step_wise", skin_limit_c=200.0)
    power, rate = workload(power_at_full=8.0)
    tr = simulate(cfg, power, rate, duration_s=1200)
    assert set(np.unique(tr.freq_fraction)) <= set(STEPS)
    jumps = np.nonzero(np.abs(np.diff(tr.state)) > 1)[0] + 1
    assert np.all(tr.die_c[jumps] >= cfg.critical_trip_c), "only the critical trip skips states"
    assert np.abs(np.diff(tr.state)).max() >= 1
    first = np.argmax(tr.state > 0)
    assert tr.die_c[first] >= cfg.passive_trip_c, "no throttling below the trip"
    assert np.all(tr.state[tr.die_c < cfg.passive_trip_c - 5] == 0) or tr.state.max() > 0
    # Once throttled the die hovers around the trip instead of running to its free steady state.
    late = tr.die_c[len(tr.die_c) // 2 :]
    assert late.max() < steady_state_die_c(cfg, power[0]) - 5
    assert abs(late.mean() - cfg.passive_trip_c) < 3.0


def test_step_wise_forces_deepest_state_at_critical():
    cfg = make_cfg(
        governor="step_wise", die_heat_capacity_j_per_k=0.05, skin_limit_c=200.0, polling_ms=1000.0
    )
    power = np.array([60.0, 50.0, 40.0, 30.0, 2.0])
    tr = simulate(cfg, power, np.ones(5), duration_s=30, dt_s=0.01)
    hot = np.nonzero(tr.die_c >= cfg.critical_trip_c)[0]
    assert len(hot)
    polls_after = [i for i in range(hot[0], len(tr.state)) if (i + 1) % 100 == 0]
    assert tr.state[polls_after[0]] == len(STEPS) - 1


def test_power_allocator_settles_at_control_temperature_with_sustainable_power():
    # Sustainable power chosen so that P * R_total puts the die exactly at the control trip.
    cfg0 = make_cfg(governor="power_allocator", skin_limit_c=200.0)
    r_total = cfg0.die_to_skin_k_per_w + cfg0.skin_to_ambient_k_per_w
    sustainable = (cfg0.critical_trip_c - cfg0.ambient_c) / r_total
    cfg = replace(cfg0, sustainable_power_w=sustainable)
    f = np.linspace(1.0, 0.3, 15)
    cfg = replace(cfg, freq_steps=tuple(f))
    power = 0.3 + 7.0 * f**2
    tr = simulate(cfg, power, 20 * f, duration_s=3600)
    late = slice(len(tr.die_c) * 3 // 4, None)
    assert abs(tr.die_c[late].mean() - cfg.critical_trip_c) < 1.5
    assert abs(tr.power_w[late].mean() - sustainable) < 0.1 * sustainable
    assert tr.die_c.max() < cfg.critical_trip_c + 5


def test_power_allocator_grants_full_power_below_switch_on():
    cfg = make_cfg(governor="power_allocator")
    power, rate = workload(power_at_full=1.0)  # steady die 37 C, skin 34 C: never switches on
    tr = simulate(cfg, power, rate, duration_s=1200)
    assert np.all(tr.state == 0)


def test_skin_zone_limits_sustained_power():
    cfg = make_cfg(governor="step_wise", passive_trip_c=95.0, critical_trip_c=105.0)
    power, rate = workload(power_at_full=5.0)
    tr = simulate(cfg, power, rate, duration_s=3600)
    assert tr.state.max() > 0
    assert tr.skin_c[len(tr.skin_c) // 2 :].max() < cfg.skin_limit_c + 1.5


def test_rejects_bad_power_and_governor():
    cfg = make_cfg()
    with pytest.raises(ValueError, match="power_w"):
        simulate(cfg, [np.nan] * 5, np.ones(5), 1.0)
    with pytest.raises(ValueError, match="one value per freq step"):
        simulate(cfg, np.ones(3), np.ones(3), 1.0)
    with pytest.raises(ValueError, match="governor"):
        simulate(cfg, np.ones(5), np.ones(5), 1.0, governor="ondemand")


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("governor", [GOV_OFF, GOV_STEP_WISE, GOV_POWER_ALLOCATOR])
def test_numba_core_matches_reference(seed, governor):
    rng = np.random.default_rng(seed)
    nsteps = int(rng.integers(1, 7))
    steps = tuple(np.sort(rng.uniform(0.2, 0.99, nsteps - 1))[::-1]) if nsteps > 1 else ()
    cfg = make_cfg(
        die_to_skin_k_per_w=rng.uniform(0.5, 6),
        skin_to_ambient_k_per_w=rng.uniform(3, 15),
        die_heat_capacity_j_per_k=rng.uniform(0.2, 5),
        skin_heat_capacity_j_per_k=rng.uniform(5, 80),
        ambient_c=rng.uniform(15, 40),
        passive_trip_c=rng.uniform(45, 60),
        critical_trip_c=rng.uniform(62, 80),
        skin_limit_c=rng.uniform(38, 46),
        sustainable_power_w=rng.uniform(1, 5),
        freq_steps=(1.0,) + tuple(float(s) for s in steps),
        k_d=float(rng.choice([0.0, 50.0])),
        polling_ms=float(rng.choice([10.0, 100.0, 250.0])),
    )
    f = np.asarray(cfg.freq_steps)
    power = rng.uniform(0, 1) + rng.uniform(3, 12) * f**2
    n, dt = 4000, float(rng.choice([0.01, 0.05]))
    prm = pack_params(cfg)
    die, skin, state = np.empty(n), np.empty(n), np.empty(n, dtype=np.int32)
    _simulate_core(power, n, dt, governor, prm, die, skin, state)
    rdie, rskin, rstate = simulate_ref(power, n, dt, governor, prm)
    assert_within(state, rstate, 0, "governor state")
    assert_within(die, rdie, CORE_VS_REF_TEMP_TOL_C, "die_c")
    assert_within(skin, rskin, CORE_VS_REF_TEMP_TOL_C, "skin_c")


def test_zero_steps_and_single_state():
    cfg = make_cfg(freq_steps=(1.0,))
    tr = simulate(cfg, [4.0], [10.0], duration_s=300)
    assert np.all(tr.state == 0)
    die, skin, state = simulate_ref(np.array([4.0]), 0, 0.01, GOV_STEP_WISE, pack_params(cfg))
    assert len(die) == len(skin) == len(state) == 0


@pytest.mark.parametrize(
    "t_die,expected_budget_w", [(66.0, 7.0), (70.0, 5.0), (75.0, 2.5), (80.0, 1.25)]
)
def test_power_allocator_gains_follow_the_kernel_docs(t_die, expected_budget_w):
    # Die held at t_die (huge heat capacity), integral off: budget = sustainable + k_p * (75 - t_die)
    # with k_pu = 2 * sustainable / (75 - 65) below 75 (the P term is 2x sustainable at switch-on)
    # and k_po = sustainable / (75 - 65) above it. Sustainable = 2.5 W.
    cfg = make_cfg(
        governor="power_allocator",
        die_heat_capacity_j_per_k=1e9,
        k_i=0.0,
        skin_heat_capacity_j_per_k=1e9,
        freq_steps=tuple(np.linspace(1.0, 0.1, 37)),
    )
    power = np.linspace(10.0, 0.1, 37)
    tr = simulate(cfg, power, np.ones(37), duration_s=0.1, t0_die_c=t_die, t0_skin_c=25.0)
    s = tr.state[-1]
    assert power[s] <= expected_budget_w + 1e-6, "the chosen step fits the budget"
    assert s == 0 or power[s - 1] > expected_budget_w + 1e-6, "and is the fastest that does"


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), governor=st.sampled_from(["step_wise", "power_allocator"]))
def test_throttling_never_raises_throughput_for_random_phones(seed, governor):
    rng = np.random.default_rng(seed)
    cfg = make_cfg(
        governor=governor,
        die_to_skin_k_per_w=rng.uniform(0.5, 12),
        skin_to_ambient_k_per_w=rng.uniform(2, 15),
        die_heat_capacity_j_per_k=rng.uniform(0.5, 10),
        skin_heat_capacity_j_per_k=rng.uniform(10, 200),
        ambient_c=rng.uniform(0, 40),
        passive_trip_c=rng.uniform(45, 70),
        critical_trip_c=rng.uniform(72, 95),
        skin_limit_c=rng.uniform(40, 48),
        sustainable_power_w=rng.uniform(0.5, 6),
    )
    f = np.asarray(cfg.freq_steps)
    power = rng.uniform(0, 1.5) + rng.uniform(0.5, 12) * f ** rng.uniform(1, 3)
    rate = rng.uniform(1, 40) * f
    free = simulate(cfg, power, rate, duration_s=600, governor="off")
    gov = simulate(cfg, power, rate, duration_s=600)
    assert np.all(gov.rate <= free.rate) and gov.rate.sum() <= free.rate.sum()
    assert gov.die_c.max() <= free.die_c.max() + 1e-9


def test_thermal_benchmarks_are_well_formed():
    import bench.bench_thermal as bt

    cls = bt.ThermalStepper
    assert len(cls.params) == len(cls.param_names)
    bench = cls()
    bench.setup("power_allocator")
    assert 0 < bench.track_step_time_vs_numba_probe("power_allocator") < 1
    assert np.isfinite(bench.out[0]).all()
