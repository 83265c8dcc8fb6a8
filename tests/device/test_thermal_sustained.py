"""Sustained generation on the shipped profiles: operating points, throttling, summary metrics."""

import numpy as np
import pytest

from harmony_ref.config import RunConfig
from harmony_ref.device.runtime import load_profile
from harmony_ref.device.soc import shipped_profiles
from harmony_ref.device.thermal import (
    decode_operating_points,
    sustained_generation,
    thermal_summary,
)

CONFIG = RunConfig.from_names(model="llama-3.2-3b", policy="int4-g128")
# Published phones keep roughly half to two thirds of peak LLM decode throughput after 10 min.
FLAGSHIP_RATIO_RANGE = (0.5, 0.67)


@pytest.mark.parametrize("profile", shipped_profiles())
def test_operating_points_slow_down_and_cool_down_with_frequency(profile):
    pts = decode_operating_points(load_profile(profile), CONFIG)
    assert np.all(np.diff(pts.tokens_per_s) < 0)
    assert np.all(np.diff(pts.power_w) < 0)
    assert np.all(pts.power_w > load_profile(profile).thermal.static_power_w)


def test_flagship_keeps_half_to_two_thirds_after_ten_minutes():
    m = thermal_summary(load_profile("harmony-flagship"), CONFIG, minutes=10)
    lo, hi = FLAGSHIP_RATIO_RANGE
    assert lo <= m.value("sustained_peak_ratio_10min") <= hi
    assert 0 < m.value("time_to_first_throttle_s") < 600
    assert all(x.kind == "exact" for x in m)
    assert set(m.names()) == {
        "sustained_peak_ratio_10min",
        "time_to_first_throttle_s",
        "peak_die_c",
        "peak_skin_c",
        "energy_per_token_mj",
    }


@pytest.mark.parametrize("profile", shipped_profiles())
def test_governor_never_raises_throughput_and_bounds_temperature(profile):
    prof = load_profile(profile)
    free = sustained_generation(prof, CONFIG, minutes=15, governor="off")
    gov = sustained_generation(prof, CONFIG, minutes=15)
    assert np.all(gov.trace.rate <= free.trace.rate)
    assert gov.summary()["tokens_generated"] <= free.summary()["tokens_generated"]
    assert gov.summary()["peak_die_c"] <= free.summary()["peak_die_c"]
    assert gov.summary()["peak_die_c"] < prof.thermal.critical_trip_c + 5


def test_summary_is_deterministic_and_consistent():
    prof = load_profile("harmony-flagship")
    a = sustained_generation(prof, CONFIG, minutes=12)
    b = sustained_generation(prof, CONFIG, minutes=12)
    assert a.summary() == b.summary()
    s = a.summary()
    assert s["energy_per_token_mj"] == pytest.approx(
        s["mean_power_w"] * s["duration_s"] / s["tokens_generated"] * 1e3
    )
    series = a.series(60.0)
    assert len(series["time_s"]) == 12 and series["tokens_per_s"][0] <= a.peak_tokens_per_s + 1e-9


def test_thermal_summary_needs_ten_minutes():
    with pytest.raises(ValueError, match="10 minutes"):
        thermal_summary("harmony-flagship", CONFIG, minutes=5)
