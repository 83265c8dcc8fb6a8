"""pytest-benchmark: how many full SimulatedDevice predictions per second (issue 4 asks for at
least 1,000). Run with `python -m pytest tests/perf/test_perf_device.py --benchmark-enable`;
predictions/s = 1 / mean (x 64 for the sweep). Not an assert: speed lives in benchmarks."""

from harmony_ref.backends.simulated import SimulatedDevice
from harmony_ref.config import RunConfig
from harmony_ref.model import graph
from tests.perf.conftest import gate_relative, reference_probe

SWEEP = 64


def _record(benchmark, perf_summary, name, predictions_per_call):
    """Predictions per second from the benchmark's median, into the shared perf summary."""
    stats = getattr(benchmark, "stats", None)
    if not benchmark.enabled or stats is None:
        return
    median_s = stats.stats.median
    info = {"median_ms": median_s * 1e3, "predictions_per_s": predictions_per_call / median_s}
    benchmark.extra_info.update(info)
    perf_summary.append({"benchmark": name, **info})


def _clear_caches():
    graph.build_graph.cache_clear()
    graph.layer_groups.cache_clear()


def test_predict_repeated_config(benchmark, perf_summary):
    """The same config again and again (graphs cached): a gate or asv run."""
    dev = SimulatedDevice("harmony-flagship")
    config = RunConfig.from_names(model="llama-3.2-3b", policy="int4-g128")
    m = benchmark(dev.predict, config)
    gate_relative(benchmark, lambda: dev.predict(config), reference_probe, "reference probe")
    _record(benchmark, perf_summary, "predict, same config (graphs cached)", 1)
    assert m.value("decode_tokens_per_s") > 0


def test_predict_cold(benchmark, perf_summary):
    """Every prediction builds its graphs from scratch."""
    dev = SimulatedDevice("harmony-flagship")
    config = RunConfig.from_names(model="llama-3.2-3b", policy="mixed")
    m = benchmark.pedantic(
        dev.predict, args=(config,), setup=_clear_caches, rounds=200, iterations=1
    )

    def cold():
        _clear_caches()
        dev.predict(config)

    gate_relative(benchmark, cold, reference_probe, "reference probe")
    _record(benchmark, perf_summary, "predict, cold (graphs and layer formats rebuilt)", 1)
    assert m.value("decode_tokens_per_s") > 0


def test_predict_sweep_of_distinct_scenarios(benchmark, perf_summary):
    """64 different prompt lengths per call (a planner's sweep): no two share a prefill graph."""
    dev = SimulatedDevice("harmony-midrange")
    configs = [
        RunConfig.from_names(
            model="qwen2.5-1.5b",
            policy="int4-g32",
            prompt_tokens=64 + 16 * i,
            new_tokens=64,
            context_tokens=4096,
        )
        for i in range(SWEEP)
    ]

    def sweep():
        _clear_caches()
        return [dev.predict(c) for c in configs]

    out = benchmark(sweep)
    gate_relative(benchmark, sweep, reference_probe, "reference probe")
    _record(benchmark, perf_summary, f"predict, sweep of {SWEEP} prompt lengths", SWEEP)
    assert len(out) == SWEEP
