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
