"""Host measurement helpers (timing, thermal gate) and HostDevice on a scaled-down model."""

import itertools

import pytest

from harmony_ref.hil._timing import ThermalGate, cpu_temps_c, peak_rss_mb, time_call


def test_time_call_keeps_median_and_samples():
    calls = []
    t = time_call(lambda: calls.append(1), warmup=2, repeats=5)
    assert len(t.samples_s) == 5
    assert len(calls) == 7
    assert min(t.samples_s) <= t.median_s <= max(t.samples_s)


def test_time_call_loops_short_calls():
    calls = []
    t = time_call(lambda: calls.append(1), warmup=0, repeats=3, min_sample_s=1e-3)
    assert len(calls) > 3 + 1  # each sample looped the call more than once
    assert t.median_s < 1e-3


def test_thermal_gate_waits_until_cool():
    temps = iter([80.0, 75.0, 69.0])
    clock = itertools.count(0.0, 1.0)
    g = ThermalGate(threshold_c=70.0, timeout_s=60)
    out = g.wait(sleep=lambda s: None, read=lambda: next(temps), clock=lambda: next(clock))
    assert out.startswith("cool: 69.0 C")
    assert g.seen_c == [80.0, 75.0, 69.0]


def test_thermal_gate_is_bounded():
    clock = itertools.count(0.0, 10.0)
    g = ThermalGate(threshold_c=50.0, timeout_s=30)
    out = g.wait(sleep=lambda s: None, read=lambda: 90.0, clock=lambda: next(clock))
    assert out.startswith("timeout: still 90.0 C")
    assert len(g.seen_c) <= 5


def test_thermal_gate_without_sensors_says_so():
    g = ThermalGate(threshold_c=50.0)
    assert "no temperature sensor" in g.wait(read=lambda: None)


def test_host_probes_do_not_fail():
    assert peak_rss_mb() > 1
    assert isinstance(cpu_temps_c(), dict)
