"""Host measurement helpers (timing, thermal gate) and HostDevice on a scaled-down model."""

import itertools

import pytest

from harmony_ref.backends.host_timing import (
    ThermalGate,
    cpu_temps_c,
    interleaved_times_s,
    peak_rss_mb,
    time_call,
)


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


class StepClock:
    """A clock that each fn call advances by that fn's cost (seconds), nothing else."""

    def __init__(self):
        self.now = 0.0
        self.log = []

    def __call__(self):
        return self.now

    def fn(self, name, cost):
        def call():
            self.log.append(name)
            self.now += cost

        return call


def test_interleaved_times_blocks_in_turn_per_call_times():
    c = StepClock()
    a, b = c.fn("a", 0.25), c.fn("b", 0.5)
    out = interleaved_times_s(
        [a, b], 2, calls=[2, 3], warmup=1, clock=c, before=lambda i: c.log.append(f"pause{i}")
    )
    assert out == [[0.25, 0.25], [0.5, 0.5]]  # block time over its calls
    assert c.log == ["a", "b"] + (["pause0", "a", "a", "pause1", "b", "b", "b"] * 2)


def test_interleaved_times_each_call_and_early_stop():
    c = StepClock()
    costs = iter([1.0, 3.0, 2.0] * 10)

    def a():
        c.now += next(costs)

    rounds_seen = []

    def stop(rounds, out):
        rounds_seen.append(rounds)
        return sum(out[0]) >= 10

    out = interleaved_times_s([a], 9, calls=3, clock=c, each_call=True, stop=stop)
    assert out == [[1.0, 3.0, 2.0, 1.0, 3.0, 2.0]]  # 6 s after one round, 12 s after two: stop
    assert rounds_seen == [1, 2]


@pytest.mark.parametrize(
    "kwargs",
    [{"rounds": 0}, {"warmup": -1}, {"calls": 0}, {"calls": [1, 2, 3]}],
)
def test_interleaved_times_refuses_bad_counts(kwargs):
    args = {"rounds": 1, **kwargs}
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        interleaved_times_s([print, print], **args)


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


# --- HostDevice on a scaled-down model ---------------------------------------------------------

import dataclasses  # noqa: E402

from harmony_ref.backends.host import HostDevice, scaled_spec, weight_mb  # noqa: E402
from harmony_ref.config import RunConfig  # noqa: E402

STANDARD = {
    "ttft_ms",
    "prefill_ms",
    "prefill_tokens_per_s",
    "decode_step_ms",
    "decode_tokens_per_s",
    "e2e_ms",
    "peak_memory_mb",
    "weights_mb",
    "kv_cache_mb",
    "kernel_launches_per_token",
}


def tiny(fused=True, policy="int4-g32", model="qwen2.5-0.5b", div=8, prompt=8, new=4):
    c = RunConfig.from_names(
        model=model,
        policy=policy,
        prompt_tokens=prompt,
        new_tokens=new,
        context_tokens=32,
        fused=fused,
    )
    return dataclasses.replace(c, spec=scaled_spec(c.spec, div))


@pytest.fixture(scope="module")
def run():
    return HostDevice(repeats=3).run(tiny())


def test_same_metric_names_as_simulated(run):
    from harmony_ref.backends.simulated import SimulatedDevice

    sim = SimulatedDevice("harmony-flagship").predict(run.config)
    assert STANDARD <= set(run.metrics.names())
    assert STANDARD <= set(sim.names())
    # the exact ones agree: same weights, and an fp16 cache is 2 x layers x kv_dim x context x 2 B
    for name in ("weights_mb", "kv_cache_mb"):
        assert run.metrics.value(name) == pytest.approx(sim.value(name), rel=1e-9), name
    m = run.metrics
    assert m.value("prefill_tokens_per_s") == pytest.approx(
        8 / (m.value("prefill_ms") / 1e3)
    )  # 8-token prompt


def test_breakdown_metrics_match_simulated_definitions(run):
    """Without a host profile: the graph/memory metrics are the device model's own numbers for the
    measured model (budget: this machine's RAM), the measured ones follow their definitions."""
    import psutil

    from harmony_ref.backends.simulated import SimulatedDevice, phone_only
    from harmony_ref.device.runtime import load_profile

    m, c = run.metrics, run.config
    sim = SimulatedDevice("harmony-flagship").predict(c)
    assert set(m.names()) == {n for n in sim.names() if not phone_only(n)}
    for name in (
        "weights_mb",
        "kv_cache_mb",
        "activations_mb",
        "prefill_kernel_launches",
        "kernel_launches_per_token",
    ):
        assert m[name].kind == "exact"
        assert m.value(name) == pytest.approx(sim.value(name), rel=1e-9), name
    # DRAM per token: the device model's count for the step the host ran (the middle one, context
    # 8 + 4 // 2 + 1); the simulated record's is the mean over all steps, half a position less KV
    from harmony_ref.device.cost import phase_cost

    step = phase_cost(load_profile("harmony-flagship"), c, "decode", context=11)
    assert m.value("decode_dram_mb_per_token") == pytest.approx(step.dram_bytes / 1e6, rel=1e-9)
    assert m.value("decode_dram_mb_per_token") == pytest.approx(
        sim.value("decode_dram_mb_per_token"), rel=1e-2
    )
    assert m.value("workspace_mb") == 0.0
    assert m.value("app_budget_mb") == pytest.approx(psutil.virtual_memory().total / 1e6)
    assert "total RAM" in run.provenance["memory_budget"]
    assert m.value("memory_headroom_mb") == pytest.approx(
        m.value("app_budget_mb")
        - m.value("weights_mb")
        - m.value("kv_cache_mb")
        - m.value("activations_mb")
    )
    assert m.value("fits_memory") == 1.0
    assert m.value("decode_bandwidth_gbps") == pytest.approx(
        m.value("decode_dram_mb_per_token") * 1e6 / (m.value("decode_step_ms") / 1e3) / 1e9
    )
    for name in ("launch_overhead_pct", "decode_memory_bound_pct"):
        assert m[name].kind == "measured" and 0 < m.value(name) < 100, (name, m.value(name))
    assert "empty Numba kernel" in m["launch_overhead_pct"].description


def test_every_op_timed_with_samples(run):
    from harmony_ref.model.graph import build_graph

    c = run.config
    n_prefill = len(build_graph(c.spec, c.policy, "prefill", tokens=8).ops)
    assert sum(t.phase == "prefill" for t in run.ops) == n_prefill
    assert all(len(t.samples_s) == 3 and t.median_s > 0 for t in run.ops)
    m = run.metrics
    assert m["prefill_ms"].kind == "measured" and len(m["prefill_ms"].samples) == 3
    # the phase is the sum of its ops' medians
    assert m.value("prefill_ms") == pytest.approx(
        1e3 * sum(t.median_s for t in run.ops if t.phase == "prefill")
    )
    assert m.value("decode_tokens_per_s") == pytest.approx(1e3 / m.value("decode_step_ms"))
    assert m.value("e2e_ms") == pytest.approx(m.value("prefill_ms") + 4 * m.value("decode_step_ms"))
    # TTFT as SimulatedDevice defines it: prefill + the step that emits the first token
    assert m.value("ttft_ms") == pytest.approx(m.value("prefill_ms") + m.value("decode_step_ms"))


def test_kernels_and_environment_reported(run):
    p = run.provenance
    assert "numba matmul_w4" in p["kernels"]
    assert "decode_attention" in p["kernels"]
    assert p["host_model"] == "qwen2.5-0.5b/w8"
    # environment readings live in the provenance, never as metrics
    assert "cpu_temp_max_c" in p or "not exposed" in p["cpu_temperature"]
    assert "cpu_freq_mhz" in p or "not exposed" in p["cpu_freq"]
    assert not [n for n in run.metrics.names() if n.startswith("host_cpu")]
    assert run.metrics.value("peak_memory_mb") > run.metrics.value("weights_mb")


def test_too_large_model_refused_or_scaled():
    big = RunConfig.from_names(
        model="llama-3.2-3b", policy="int4-g128", prompt_tokens=8, new_tokens=2, context_tokens=16
    )
    assert weight_mb(big) > 1000
    with pytest.raises(ValueError, match="max_weight_mb"):
        HostDevice(repeats=1).run(big)
    scaled = HostDevice(repeats=1, max_weight_mb=20, auto_scale=True, warmup=0)
    r = scaled.run(big)
    assert r.provenance["host_model"].startswith("llama-3.2-3b/w")
    assert weight_mb(r.config) <= 20


def test_scaled_spec_keeps_group_alignment():
    from harmony_ref.model.spec import get_spec

    for name in ("qwen2.5-0.5b", "llama-3.2-3b", "all-minilm-l6"):
        for d in (2, 4, 8):
            s = scaled_spec(get_spec(name), d)
            for lin in s.linears():
                assert lin.k_in % 128 == 0, (name, d, lin)
            assert s.n_heads % s.n_kv_heads == 0


def test_model_error_metric(microbench_profile):
    prof = microbench_profile
    r = HostDevice(repeats=2, model_profile=str(prof)).run(tiny(new=2))
    m = r.metrics["host_model_mape_pct"]
    assert m.unit == "%" and m.value >= 0
    assert r.provenance["model_profile"] == str(prof)


def test_backends_by_name_same_names_and_physics(tmp_path):
    import shlex
    import sys
    from pathlib import Path

    from harmony_ref.backends.make import make_backend

    cfg = tiny(new=2)
    sim = make_backend("simulated", "harmony-flagship").run(cfg).metrics
    m = make_backend("host", repeats=2).run(cfg)
    host, physics, findings = m.metrics, m.physics, list(m.findings)
    assert STANDARD <= set(sim.names()) and STANDARD <= set(host.names())
    assert physics.startswith("not checked") and findings == []
    fake = Path(__file__).parents[1] / "fake_device" / "benchmark.py"
    cmd = " ".join(
        shlex.quote(s)
        for s in (sys.executable, str(fake), "--format", "llama-bench", "--scale", "0.1")
    )
    phone = RunConfig.from_names(model="llama-3.2-1b", policy="int4-g32")
    dev = make_backend("command", "harmony-flagship", command=cmd, fmt="llama-bench")
    measured = dev.run(phone)
    m, findings = measured.metrics, measured.findings
    assert "implausible" in m["decode_tokens_per_s"].flags and findings
    assert measured.physics == f"checked against harmony-flagship: {len(findings)} implausible"
    with pytest.raises(ValueError, match="unknown backend"):
        make_backend("fpga")


def test_launch_refit_on_phase_totals(run):
    from harmony_ref.calibrate.fit import HostFit, fit_launch_on_phases, samples_from_op_times

    f = HostFit(0.0, {"int4": 50e9, "int8": 40e9, "fp16": 60e9, "vector": 20e9}, 30e9, (), 1)
    g = fit_launch_on_phases(f, [run], 1 << 20, stat="median")
    num = den = 0.0
    for phase in ("prefill", "decode"):
        ts = [t for t in run.ops if t.phase == phase]
        bound = sum(
            max(f.compute_s(s), f.memory_s(s))
            for s in samples_from_op_times(ts, 1 << 20, dedupe=False)
        )
        n = sum(t.launches for t in ts)
        num += n * (sum(t.median_s for t in ts) - bound)
        den += n * n
    assert g.launch_s == pytest.approx(max(0.0, num / den), rel=1e-12)
    assert g.rates == f.rates and "launch" in g.fitted


def test_load_canary_wait_is_bounded():
    import time

    from harmony_ref.calibrate.microbench import LoadCanary

    c = LoadCanary()
    assert c.ratio() >= 1.0  # against the fastest seen so far, itself included
    t0 = time.monotonic()
    r = c.wait_quiet(max_ratio=0.0, timeout_s=0.3, poll_s=0.05)  # never quiet enough: times out
    assert r >= 1.0 and time.monotonic() - t0 < 5


def test_make_backend_command_fills_config_and_values():
    from harmony_ref.backends.make import make_backend

    dev = make_backend(
        "command",
        command="hdc -t {serial} shell bench --model {model} -p {prompt_tokens}",
        fmt="llama-bench",
        values={"serial": "ABC123"},
    )
    cfg = RunConfig.from_names(model="llama-3.2-1b", policy="int4-g32", prompt_tokens=64)
    assert dev.command_for(cfg) == "hdc -t ABC123 shell bench --model llama-3.2-1b -p 64"
    with pytest.raises(ValueError, match="needs a command template"):
        make_backend("command", fmt="llama-bench")
