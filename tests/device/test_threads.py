"""The CPU thread model on the profile's clusters: thread rates and the winning thread count
worked by hand on a stated cluster, the shipped profiles' sweep, and bad input."""

import dataclasses
import json

import numpy as np
import pytest

from harmony_ref.cli import main
from harmony_ref.config import RunConfig
from harmony_ref.device.runtime import load_profile
from harmony_ref.device.soc import CpuCluster, CpuSpec
from harmony_ref.device.threads import (
    NoThreadModel,
    cores_used,
    op_time_threads_s,
    thread_rates,
    thread_sweep,
)

# A stated cluster: 1 prime @ 3.0 GHz + 3 big @ 2.5 GHz (64 int8 ops/cycle) + 4 little @ 2.0 GHz
# (32 int8 ops/cycle); 1 us launch, 1 us of barrier per extra thread per op.
STATED = CpuSpec(
    (
        CpuCluster("little", 4, 2.0, 16.0, 32.0, 24.0),  # listed out of order on purpose
        CpuCluster("prime", 1, 3.0, 32.0, 64.0, 48.0),
        CpuCluster("big", 3, 2.5, 32.0, 64.0, 48.0),
    ),
    launch_us=1.0,
    sync_us_per_thread=1.0,
)


def _profile(cpu=STATED):
    return dataclasses.replace(load_profile("harmony-flagship"), cpu=cpu)


def test_threads_take_the_fastest_cores_and_wait_for_the_slowest():
    assert [c.name for c in cores_used(STATED, 5)] == ["prime", "big", "big", "big", "little"]
    # int8 ops/s = threads x the slowest core used, by hand:
    want = {1: 1 * 3.0 * 64, 2: 2 * 2.5 * 64, 4: 4 * 2.5 * 64, 5: 5 * 2.0 * 32, 8: 8 * 2.0 * 32}
    for n, gops in want.items():
        assert thread_rates(STATED, n)["int8"] == pytest.approx(gops * 1e9)


def test_the_winning_thread_count_on_the_stated_cluster_by_hand():
    # A compute-bound op: 1e9 int8 ops, no DRAM traffic, compute_efficiency 0.5 (harmony-flagship).
    # time(N) = 1e9 / (N x slowest x 0.5) + 1 us launch + 1 us x (N - 1):
    #   N=1: 1e9 / 96e9   = 10.4167 ms      N=4: 1e9 / 320e9 = 3.1250 ms (+ 4 us)
    #   N=3: 1e9 / 240e9  =  4.1667 ms      N=5: 1e9 / 160e9 = 6.2500 ms (+ 5 us)
    #   N=8: 1e9 / 256e9  =  3.9063 ms (+ 8 us): 4 threads win; 8 are 25% slower than 4.
    prof = _profile()
    times = {n: float(op_time_threads_s(1e9, 0.0, 0.0, "int8", prof, n)[0]) for n in range(1, 9)}
    hand = {
        1: 1e9 / 96e9 + 1e-6,
        3: 1e9 / 240e9 + 3e-6,
        4: 1e9 / 320e9 + 4e-6,
        5: 1e9 / 160e9 + 5e-6,
        8: 1e9 / 256e9 + 8e-6,
    }
    for n, t in hand.items():
        assert times[n] == pytest.approx(t, rel=1e-12)
    assert min(times, key=times.get) == 4
    assert times[8] / times[4] == pytest.approx((1e9 / 256e9 + 8e-6) / (1e9 / 320e9 + 4e-6))


def test_memory_still_bounds_and_sync_then_favours_fewer_threads():
    # 0.3 GB of DRAM traffic at 68.3 GB/s x 0.7 = 6.275 ms: one thread is compute-bound
    # (10.417 ms), two are not (1e9 / 160e9 = 6.25 ms): from 2 threads on the time is memory +
    # launch + sync, so 2 threads win and every thread beyond costs 1 us more.
    prof = _profile()
    times = [float(op_time_threads_s(1e9, 0.0, 0.3e9, "int8", prof, n)[0]) for n in range(1, 9)]
    memory = 0.3e9 / (68.3e9 * 0.7)
    assert times[0] == pytest.approx(1e9 / 96e9 + 1e-6)
    assert times[1] == pytest.approx(memory + 2e-6)
    assert times[7] == pytest.approx(memory + 8e-6)
    assert int(np.argmin(times)) + 1 == 2


def test_shipped_flagship_sweep_and_the_source_claim():
    """The source measured 4 threads best and 8 threads 15% slower than 4 on a Kirin 9000-class
    phone. The model (sync_us_per_thread = 0.5, an assumption, not fitted) agrees on the winner;
    for decode, memory-bound at 4 and 8 threads, it puts 8 only ~2% behind 4, for prefill
    (compute-bound, where the A55s hold the A77s back) ~19% behind."""
    points, best = thread_sweep(load_profile("harmony-flagship"), RunConfig.from_names())
    assert best.threads == 4 and best.cores == "1 prime + 3 big"
    p4, p8 = points[3], points[7]
    decode_slower = 1 - p8.decode_tokens_per_s / p4.decode_tokens_per_s
    prefill_slower = 1 - p8.prefill_tokens_per_s / p4.prefill_tokens_per_s
    assert 0.0 < decode_slower < 0.05
    assert 0.15 < prefill_slower < 0.25
    # Fitting the barrier to the claim (not a check then): 6.3 us gives 15% in decode, but 3
    # threads then beat 4, so decode cannot match both halves of the claim.
    fitted = dataclasses.replace(load_profile("harmony-flagship"))
    fitted = dataclasses.replace(
        fitted, cpu=dataclasses.replace(fitted.cpu, sync_us_per_thread=6.3)
    )
    pts, b = thread_sweep(fitted, RunConfig.from_names())
    assert 1 - pts[7].decode_tokens_per_s / pts[3].decode_tokens_per_s == pytest.approx(
        0.15, abs=0.005
    )
    assert b.threads == 3
    for name in ("harmony-midrange", "harmony-lowend"):
        _, b = thread_sweep(load_profile(name), RunConfig.from_names(model="qwen2.5-0.5b"))
        assert b.threads == 2  # both big cores, no little one


def test_bad_thread_input():
    with pytest.raises(ValueError, match=r"threads = 9: must be an int in 1..8"):
        cores_used(STATED, 9)
    with pytest.raises(NoThreadModel, match=r"no \[cpu\] section"):
        thread_sweep(_profile(cpu=None), RunConfig.from_names())


def test_predict_threads_cli(capsys):
    assert main(["predict", "--threads", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["threads"]["best_threads"] == 4 and len(out["threads"]["points"]) == 8
    assert out["metrics"]["cpu_best_threads"]["value"] == 4
    assert main(["predict", "--threads", "9"]) == 2
    assert "--threads 9: must be in 1..8" in capsys.readouterr().err
