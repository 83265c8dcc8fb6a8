"""`tox -e perf` (harmony_ref/track/perf.py) judges pytest-benchmark runs by the gate's rule for
measured metrics and ends with one line; its summary table fits 100 columns."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harmony_ref.metrics import Metric
from harmony_ref.track import perf
from tests.perf.conftest import SUMMARY_WIDTH, format_summary

KERNEL = "tests/perf/test_perf_kernels.py::test_perf_matmul_w8_gemv[4096]"
OTHER = "tests/perf/test_perf_kernels.py::test_perf_matmul_w4_gemv[4096]"


def timings(median_ms: float, n: int = 200, seed: int = 0) -> Metric:
    rng = np.random.default_rng(seed)
    samples = tuple(median_ms * (1 + 0.02 * rng.standard_normal(n)))
    return Metric("x", float(np.median(samples)), "ms", "lower", "measured", samples)


def named(name, m):
    return Metric(name, m.value, m.unit, m.direction, m.kind, m.samples)


def test_a_confirmed_30pct_slowdown_fails_with_one_line_naming_the_benchmark():
    prev = {KERNEL: named(KERNEL, timings(1.0)), OTHER: named(OTHER, timings(2.0, seed=1))}
    cur = {KERNEL: named(KERNEL, timings(1.3, seed=2)), OTHER: named(OTHER, timings(2.0, seed=3))}
    asked = []

    def rerun(names):
        asked.extend(names)
        return {KERNEL: named(KERNEL, timings(1.31, seed=4))}

    line, code = perf.summary_line(perf.judge(prev, cur, rerun), "0007_prev", [], [])
    assert code == 1 and asked == [KERNEL]
    assert "\n" not in line
    # the verdict starts with the benchmark and both measurements of its change
    assert line.startswith(
        "perf: FAIL test_perf_matmul_w8_gemv[4096] +29.8% (re-run +30.9%) | "
        "1 of 2 gated benchmarks slower than 0007_prev"
    )
    assert f"worse by > {perf.LIMIT_PCT:g}%" in line
    assert "test_perf_matmul_w4_gemv" not in line


def test_a_slowdown_the_rerun_does_not_repeat_passes_and_says_so():
    prev = {KERNEL: named(KERNEL, timings(1.0))}
    cur = {KERNEL: named(KERNEL, timings(1.5, seed=1))}
    line, code = perf.summary_line(
        perf.judge(prev, cur, lambda names: {KERNEL: named(KERNEL, timings(1.01, seed=2))}),
        "0007_prev",
        [],
        [],
    )
    assert code == 0 and line.startswith("perf: PASS 1 gated benchmarks")
    assert "1 not confirmed on re-run: test_perf_matmul_w8_gemv[4096]" in line


def test_noise_within_the_limit_passes_without_a_rerun():
    prev = {KERNEL: named(KERNEL, timings(1.0))}
    cur = {KERNEL: named(KERNEL, timings(1.05, seed=1))}

    def rerun(names):
        raise AssertionError("nothing should be re-run")

    line, code = perf.summary_line(perf.judge(prev, cur, rerun), "p", ["new_one"], [])
    assert code == 0 and "no regression" in line and "1 new" in line


def test_a_file_that_is_not_a_benchmark_run_is_bad_input(tmp_path):
    bad = tmp_path / "0001_x.json"
    bad.write_text(json.dumps({"benchmarks": [{"fullname": "a"}]}))
    with pytest.raises(ValueError, match="0001_x.json: not a pytest-benchmark result"):
        perf.load_metrics(bad)
    ungated = tmp_path / "0002_x.json"
    ungated.write_text(
        json.dumps(
            {
                "benchmarks": [
                    {
                        "fullname": KERNEL,
                        "stats": {"median": 0.002, "data": [0.002, 0.0021, 0.0019]},
                    }
                ]
            }
        )
    )
    assert perf.load_metrics(ungated) == {}  # an absolute time is saved, not gated


def test_runs_are_saved_with_raw_samples_and_compared_only_when_a_previous_one_exists(tmp_path):
    args = perf.pytest_args(["-q"], storage=tmp_path)
    assert "--benchmark-autosave" in args and "--benchmark-save-data" in args
    assert not any(a.startswith("--benchmark-compare") for a in args)
    assert args[-1] == "-q"
    assert perf.previous_runs(tmp_path) == []


def test_summary_fits_100_columns():
    kernel = {
        "benchmark": "decode_attention int8 ctx=4096 (a long benchmark name here)",
        "kernel_ms": 1.234,
        "numpy_ms": 12.5,
        "speedup_vs_numpy": 10.1,
        "achieved_gbps": 44.4,
        "copy_bandwidth_gbps": 21.9,
        "fraction_of_copy_bw": 2.03,
        "threads": 1,
    }
    fused = {
        **kernel,
        "benchmark": "norm_bias_gelu fused (128x4096)",
        "separate_kernels_ms": 0.5,
        "speedup_vs_separate": 2.9,
    }
    thermal = {
        "benchmark": "thermal stepper, power_allocator",
        "hour_at_10ms_ms": 4.8,
        "steps_per_s": 7.5e7,
        "vs_target": 15.0,
        "vs_python_ref": 512.0,
    }
    wide = {"benchmark": "many columns", **{f"column_number_{i}": 1000.0 * i for i in range(30)}}
    rows = [
        kernel,
        {**kernel, "benchmark": "matmul_w4 gemv N=11008 g32", "kernel_ms": 0.9},
        fused,
        thermal,
        wide,
    ]
    lines = format_summary(rows)
    assert max(len(line) for line in lines) <= SUMMARY_WIDTH
    text = "\n".join(lines)
    assert "threads 1" in text and "copy_GB/s 21.9" in text  # constant columns said once
    assert "column_number_29" in text and "29000" in text  # nothing dropped
    assert "7.5e+07" in text or "75000000" in text


def test_a_failed_run_is_set_aside_so_the_next_run_compares_with_the_last_passing_one(tmp_path):
    machine = tmp_path / "Linux-CPython-3.11-64bit"
    machine.mkdir()
    passing = machine / "0001_a_20260101_000000.json"
    failed = machine / "0002_b_20260101_000100.json"
    passing.write_text("{}")
    failed.write_text("{}")
    note = perf.set_aside([failed])
    assert (machine / "failed" / failed.name).is_file() and not failed.exists()
    assert sorted(machine.glob("[0-9][0-9][0-9][0-9]_*.json")) == [passing]
    assert "failed/" in note


def test_a_benchmark_with_a_same_run_reference_is_gated_on_the_ratio(tmp_path):
    run = tmp_path / "0003_x.json"
    run.write_text(
        json.dumps(
            {
                "benchmarks": [
                    {
                        "fullname": KERNEL,
                        "stats": {"median": 0.002, "data": [0.002] * 3},
                        "extra_info": {
                            "gate_samples": [0.5, 0.52, 0.49],
                            "gate_value": 0.5,
                            "gate_unit": "x NumPy baseline time",
                        },
                    }
                ]
            }
        )
    )
    m = perf.load_metrics(run)[KERNEL]
    assert (m.value, m.unit, m.samples) == (0.5, "x NumPy baseline time", (0.5, 0.52, 0.49))


def test_relative_samples_follow_the_target_not_the_machine():
    from bench.common import relative_samples

    def work(n):
        return lambda: sum(i * i for i in range(n))

    same = relative_samples(work(20000), work(20000), rounds=5)
    double = relative_samples(work(40000), work(20000), rounds=5)
    assert len(same) == 5 and 0.7 < float(np.median(same)) < 1.4
    assert 1.5 < float(np.median(double)) / float(np.median(same)) < 2.6


def test_a_previous_run_in_other_units_is_bad_input_not_a_traceback():
    prev = {KERNEL: named(KERNEL, timings(1.0))}
    m = timings(0.5, seed=1)
    cur = {KERNEL: Metric(KERNEL, m.value, "x NumPy baseline time", "lower", "measured", m.samples)}
    with pytest.raises(ValueError, match="unit is 'ms'"):
        perf.judge(prev, cur)


def test_the_baseline_is_the_median_of_the_last_runs_medians_with_their_samples_pooled():
    runs = [{KERNEL: named(KERNEL, timings(v, n=5, seed=i))} for i, v in enumerate((1.0, 1.6, 1.1))]
    base = perf.pooled(runs)[KERNEL]
    assert base.value == pytest.approx(runs[2][KERNEL].value)  # the 1.6 run does not set the bar
    assert len(base.samples) == 15
    changed = {KERNEL: Metric(KERNEL, 0.5, "x other unit", "lower", "measured", (0.5,) * 5)}
    assert perf.pooled([runs[0], changed])[KERNEL].samples == (0.5,) * 5


def test_the_limit_passes_noise_and_catches_the_30pct_switch():
    from tests.perf._slow import SLOW_FACTOR

    assert 10.0 <= perf.LIMIT_PCT < 100 * (SLOW_FACTOR - 1) - 5  # room for noise either side
    assert perf.perf_tolerances().measured_pct == perf.LIMIT_PCT


def test_relative_samples_cancel_a_linear_drift_within_a_round():
    """A machine slowing down steadily: plain target-then-baseline pairs would read the slowdown
    as a slower target; the ABBA order (target, baseline, baseline, target) does not."""
    from bench import common

    now = [0.0]
    rate = [1.0]

    def clock():
        return now[0]

    def work(cost):
        def call():
            now[0] += cost * rate[0]
            rate[0] *= 1.001  # every call a little slower than the last

        return call

    real = common.time.process_time
    common.time.process_time = clock
    try:
        samples = common.relative_samples(work(1e-3), work(1e-3), rounds=5, block_s=0.004)
    finally:
        common.time.process_time = real
    assert max(abs(s - 1.0) for s in samples) < 0.002  # a pair (A then B) would read ~1.004


def _asv_threshold(thresholds, entry):
    """The threshold asv's Regressions page applies to one entry (as asv matches: the largest
    of every key that re.match-es the entry name)."""
    import re

    return max(t for rx, t in thresholds.items() if re.match(rx, entry))


def test_asv_judges_each_timed_ratio_by_its_measured_cross_process_spread():
    """asv keeps no samples of a track_, so its Regressions page judges a timed ratio by
    `regressions_thresholds` alone: every relative timing (a track_ whose unit is a ratio,
    'x <reference> time') gets the threshold bench/asv_spread.json derived from its measured
    spread over fresh processes, or perf.LIMIT_PCT where none was measured or the spread is
    smaller; every other track_ asv's 5%."""
    from pathlib import Path

    from tools import measure_spread as ms

    root = Path(__file__).resolve().parents[2]
    thresholds = json.loads((root / "asv.conf.json").read_text())["regressions_thresholds"]
    spread = json.loads(ms.SPREAD_FILE.read_text())["entries"]
    assert thresholds[".*"] == 0.05
    relative = ms.relative_entries(".")
    names = {ms.entry_name(*e) for e in relative}
    assert set(spread) <= names, "bench/asv_spread.json names an entry no bench defines"
    for e in relative:
        name = ms.entry_name(*e)
        want = spread[name]["threshold"] if name in spread else perf.LIMIT_PCT / 100
        assert _asv_threshold(thresholds, name) == pytest.approx(want), name
        assert _asv_threshold(thresholds, name + "@main") == pytest.approx(want), name
    assert len(spread) >= 19

    for mod, cls_name, cls in ms.bench_classes():
        for attr in dir(cls):
            fn = getattr(cls, attr)
            if attr.startswith("track_") and not str(getattr(fn, "unit", "")).startswith("x "):
                name = f"{mod}.{cls_name}.{attr}"
                assert _asv_threshold(thresholds, name) == 0.05, name


def test_the_committed_spread_file_follows_its_rule():
    """Each entry's spread is max/min - 1 of its recorded values and its threshold MARGIN x
    spread rounded up to 5%, never below the perf limit: the file cannot say one thing and
    hold another."""
    from tools import measure_spread as ms

    doc = json.loads(ms.SPREAD_FILE.read_text())
    assert doc["margin"] == ms.MARGIN and doc["floor"] == pytest.approx(perf.LIMIT_PCT / 100)
    for name, m in doc["entries"].items():
        assert len(m["values"]) == m["processes"] >= 2, name
        assert m["spread"] == pytest.approx(max(m["values"]) / min(m["values"]) - 1, abs=1e-4)
        assert m["threshold"] == ms.threshold_for(m["spread"], doc["floor"]), name
        assert m["threshold"] >= 1.5 * m["spread"] - 1e-9, name


@pytest.mark.parametrize(
    "spread, want", [(0.0, 0.2), (0.1, 0.2), (0.14, 0.25), (0.36, 0.55), (0.4, 0.6)]
)
def test_threshold_rule(spread, want):
    from tools import measure_spread as ms

    assert ms.threshold_for(spread, 0.2) == pytest.approx(want)


def test_an_entry_regex_matches_only_its_own_parameters():
    import re

    from tools import measure_spread as ms

    rx = ms.entry_regex("bench_kernels.MatmulW4.track_time_vs_numpy_fp32(1, 32)")
    assert re.match(rx, "bench_kernels.MatmulW4.track_time_vs_numpy_fp32(1, 32)")
    assert re.match(rx, "bench_kernels.MatmulW4.track_time_vs_numpy_fp32(1, 32)@main")
    assert not re.match(rx, "bench_kernels.MatmulW4.track_time_vs_numpy_fp32(1, 320)")
    assert not re.match(rx, "bench_kernels.MatmulW4.track_time_vs_numpy_fp32(128, 32)")


def test_spread_entries_are_the_combinations_asv_runs_and_filter_by_parameters():
    """A combination a track skips (asv_runner's skip_params: the FP32-twin GEMV ratio at m=1)
    is neither measured nor given a threshold; --bench can name single parameter sets."""
    from bench import bench_kernels as bk
    from tools import measure_spread as ms

    assert (1,) in bk.MatmulW8.track_time_vs_numpy_fp32.skip_params
    names = [ms.entry_name(*e) for e in ms.relative_entries("MatmulW8")]
    assert "bench_kernels.MatmulW8.track_time_vs_numpy_fp32(1)" not in names
    assert "bench_kernels.MatmulW8.track_time_vs_numpy_fp32(128)" in names
    assert "bench_kernels.MatmulW8.track_time_vs_numpy_same_bytes(1)" in names
    one = [ms.entry_name(*e) for e in ms.relative_entries(r"DecodeAttention.*'int8', 512\)")]
    assert one == ["bench_kernels.DecodeAttention.track_time_vs_numpy('int8', 512)"]
