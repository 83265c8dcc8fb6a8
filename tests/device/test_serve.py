"""Serving DES: accounting invariants, queue bound, timeouts, determinism, trace parsing."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harmony_ref.device.serve import (
    Request,
    ServiceTime,
    constant_rate_service,
    load_trace,
    poisson_arrivals,
    simulate_serving,
)

FIXED = constant_rate_service(
    prefill_tokens_per_s=512.0, decode_tokens_per_s=16.0
)  # 1.06 s + 7.9 s


def fixed_service(seconds, ttft=0.0):
    return lambda prompt, new: ServiceTime(ttft, seconds)


def test_idle_session_serves_at_once():
    res = simulate_serving([Request(1.0, 512, 128)], FIXED)
    (o,) = res.outcomes
    assert o.status == "completed" and o.start_s == 1.0
    assert o.latency_s == pytest.approx(512 / 512 + 1 / 16 + 127 / 16)
    assert o.ttft_s == pytest.approx(1 + 1 / 16)


def test_full_queue_answers_busy_immediately():
    # Service 10 s; five arrivals at t=0..0.4: one served, three wait, the fifth is busy.
    reqs = [Request(0.1 * i, 1, 1) for i in range(5)]
    res = simulate_serving(reqs, fixed_service(10.0), queue_limit=3, timeout_s=100.0)
    status = [o.status for o in sorted(res.outcomes, key=lambda o: o.request.arrival_s)]
    assert status == ["completed"] * 4 + ["busy"]
    busy = [o for o in res.outcomes if o.status == "busy"][0]
    assert busy.end_s == busy.request.arrival_s
    assert res.max_queue_len == 3


def test_timeout_cuts_off_waiting_and_running_requests():
    # Service 6 s, timeout 15 s: r0 0-6, r1 6-12, r2 would run 12-18 -> cut at 15 (arrived 0),
    # r3 still waiting at its deadline 15 -> cut there without starting.
    reqs = [Request(0.0, 1, 1)] * 4
    res = simulate_serving(reqs, fixed_service(6.0, ttft=1.0), queue_limit=3, timeout_s=15.0)
    by = sorted(
        res.outcomes,
        key=lambda o: (o.request.arrival_s, o.start_s if not math.isnan(o.start_s) else 1e9),
    )
    assert [o.status for o in by] == ["completed", "completed", "timeout", "timeout"]
    assert by[2].end_s == 15.0 and by[2].ttft_s == 13.0  # got a first token before the cut
    assert math.isnan(by[3].start_s) and by[3].end_s == 15.0
    assert res.busy_time_s == pytest.approx(15.0)


def test_queue_slot_freed_by_a_timeout_admits_a_later_arrival():
    reqs = [Request(0.0, 1, 1), Request(0.0, 1, 1), Request(16.0, 1, 1)]
    res = simulate_serving(reqs, fixed_service(100.0), queue_limit=1, timeout_s=15.0)
    statuses = sorted(o.status for o in res.outcomes)
    assert statuses == ["timeout", "timeout", "timeout"]  # third was admitted, not busy


def test_zero_queue_means_busy_whenever_serving():
    reqs = [Request(0.0, 1, 1), Request(1.0, 1, 1), Request(3.0, 1, 1)]
    res = simulate_serving(reqs, fixed_service(2.0), queue_limit=0)
    assert [o.status for o in sorted(res.outcomes, key=lambda o: o.request.arrival_s)] == [
        "completed",
        "busy",
        "completed",
    ]


@settings(max_examples=60, deadline=None)
@given(
    rate=st.floats(0.05, 3.0),
    seed=st.integers(0, 2**16),
    limit=st.integers(0, 5),
    timeout=st.floats(0.5, 30.0),
    service_s=st.floats(0.01, 20.0),
)
def test_invariants_hold_for_any_load(rate, seed, limit, timeout, service_s):
    reqs = poisson_arrivals(rate, 120.0, seed)
    res = simulate_serving(
        reqs,
        fixed_service(service_s, ttft=service_s / 3),
        queue_limit=limit,
        timeout_s=timeout,
        duration_s=120.0,
    )
    s = res.summary()
    assert s["completed"] + s["busy"] + s["timed_out"] == s["arrived"] == len(reqs)
    assert max(res.queue_len_samples, default=0) <= limit
    assert 0.0 <= s["utilisation"] <= 1.0 + 1e-12
    for o in res.outcomes:
        assert o.latency_s <= timeout + 1e-9
        if o.status == "completed":
            assert o.latency_s >= service_s - 1e-9


def test_seeded_and_deterministic():
    a = simulate_serving(poisson_arrivals(0.2, 600.0, seed=7), FIXED, duration_s=600.0).summary()
    b = simulate_serving(poisson_arrivals(0.2, 600.0, seed=7), FIXED, duration_s=600.0).summary()
    c = simulate_serving(poisson_arrivals(0.2, 600.0, seed=8), FIXED, duration_s=600.0).summary()
    assert a == b and a != c


def test_heavier_load_is_busier_and_slower():
    light = simulate_serving(poisson_arrivals(0.02, 3600.0, 1), FIXED, duration_s=3600).summary()
    heavy = simulate_serving(poisson_arrivals(0.5, 3600.0, 1), FIXED, duration_s=3600).summary()
    assert heavy["busy_rate"] > light["busy_rate"]
    assert heavy["utilisation"] > light["utilisation"]
    assert heavy["latency_p90_ms"] >= light["latency_p90_ms"]


def test_trace_file_round_trip(tmp_path):
    p = tmp_path / "trace.csv"
    p.write_text("arrival_s,prompt_tokens,new_tokens\n# comment\n0.0,128,32\n\n2.5, 64, 16\n")
    reqs = load_trace(p)
    assert reqs == [Request(0.0, 128, 32), Request(2.5, 64, 16)]


@pytest.mark.parametrize(
    "body,line,what",
    [
        ("0.0,128,32\nabc,1,1\n", 2, "arrival_s = 'abc'"),
        ("0.0,128\n", 1, "expected 3 fields"),
        ("1.0,1,1\n0.5,1,1\n", 2, "non-decreasing"),
        ("0.0,1,0\n", 1, "new_tokens = 0"),
        ("0.0,1.5,3\n", 1, "prompt_tokens = '1.5'"),
        ("-1,1,1\n", 1, "arrival_s = '-1'"),
    ],
)
def test_bad_trace_names_the_line(tmp_path, body, line, what):
    p = tmp_path / "bad.csv"
    p.write_text(body)
    with pytest.raises(ValueError) as e:
        load_trace(p)
    assert f"line {line}" in str(e.value) and what in str(e.value) and "bad.csv" in str(e.value)


def test_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError):
        simulate_serving([], FIXED, queue_limit=-1)
    with pytest.raises(ValueError):
        poisson_arrivals(0.0, 10.0)
    with pytest.raises(ValueError, match="seed = -1"):
        poisson_arrivals(0.2, 10.0, seed=-1)
    (tmp_path / "empty.csv").write_text("# nothing\n")
    with pytest.raises(ValueError, match="no requests"):
        load_trace(tmp_path / "empty.csv")
