"""Serving with device-model service times: consistent with SimulatedDevice, longer work -> slower."""

import pytest

from harmony_ref.backends.simulated import SimulatedDevice
from harmony_ref.config import RunConfig
from harmony_ref.device.runtime import load_profile
from harmony_ref.device.serve import device_service_model, poisson_arrivals, simulate_serving
from harmony_ref.units import MS_PER_S

CONFIG = RunConfig.from_names(model="llama-3.2-3b", policy="int4-g128")


def test_service_time_matches_the_simulated_device():
    m = SimulatedDevice("harmony-flagship").predict(CONFIG)
    svc = device_service_model(load_profile("harmony-flagship"), CONFIG)(512, 128)
    assert svc.ttft_s * MS_PER_S == pytest.approx(m.value("ttft_ms"))
    assert svc.total_s * MS_PER_S == pytest.approx(m.value("e2e_ms"))


def test_longer_requests_take_longer_and_fit_any_context():
    svc = device_service_model(load_profile("harmony-midrange"), CONFIG)
    assert svc(64, 16).total_s < svc(512, 16).total_s < svc(512, 256).total_s
    assert svc(4000, 200).ttft_s > svc(512, 200).ttft_s  # context grows past the default 2048


def test_slower_phone_has_more_timeouts():
    reqs = poisson_arrivals(0.2, 600.0, seed=3)
    fast = simulate_serving(
        reqs, device_service_model(load_profile("harmony-flagship"), CONFIG), duration_s=600
    )
    slow = simulate_serving(
        reqs, device_service_model(load_profile("harmony-midrange"), CONFIG), duration_s=600
    )
    f, s = fast.summary(), slow.summary()
    assert s["timeout_rate"] + s["busy_rate"] > f["timeout_rate"] + f["busy_rate"]
    assert s["utilisation"] >= f["utilisation"]


def test_run_serving_is_the_simulation_of_its_arrivals(tmp_path):
    """serve's run (device/serve_run.py) simulates exactly the Poisson arrivals and the device
    service times it names; a trace's window defaults to the trace's own span, not 10 minutes."""
    from harmony_ref.device.serve_run import run_serving

    profile = load_profile("harmony-flagship")
    got = run_serving(profile, CONFIG, rate=0.2, minutes=5, seed=3, queue_limit=1, timeout_s=9.0)
    want = simulate_serving(
        poisson_arrivals(0.2, 300.0, 3, 512, 128),
        device_service_model(profile, CONFIG),
        1,
        9.0,
        300.0,
    )
    assert got.result.summary() == want.summary()
    assert got.metrics.to_dict() == want.metrics().to_dict()
    assert got.sessions is None
    assert got.source == "Poisson 0.2/s, seed 3, 512+128 tokens"
    assert got.typical == device_service_model(profile, CONFIG)(512, 128)

    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_tokens,new_tokens\n0,64,16\n2,64,16\n")
    span = run_serving(profile, CONFIG, trace=trace).result.summary()["horizon_s"]
    assert span < 60.0  # the trace's own span (its last request done), not a 600 s window


def test_run_serving_with_a_prefix_adds_the_session_metrics():
    from harmony_ref.device.serve_run import run_serving

    got = run_serving(load_profile("harmony-flagship"), CONFIG, minutes=2, prefix_tokens=256)
    assert got.sessions is not None and got.sessions["hits"] + got.sessions["misses"] > 0
    assert "serve_session_hit_rate" in got.metrics.names()
    assert "serve_busy_rate" in got.metrics.names()
