"""The change-point detector's candidate step (track/changepoints.py): the running-sums L2 cost
gives ruptures' own `CostL2` breakpoints, and its segment costs equal CostL2's within float64
rounding, on fresh random series with and without steps and on awkward ones (constant, one
outlier, a two-point segment)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import ruptures

from harmony_ref.track import changepoints as cp

REL_TOL = 1e-9  # running sums of a centred float64 signal vs a variance a segment


def _series(rng, n: int, step: float) -> np.ndarray:
    level = np.where(np.arange(n) >= n // 2, 1.0 + step, 1.0)
    return np.log(20.0 * level * rng.lognormal(0.0, 0.03, n))


@pytest.mark.parametrize("step", [0.0, 0.08, -0.2])
def test_the_fast_cost_gives_ruptures_own_breakpoints(step):
    rng = np.random.default_rng()
    for _ in range(40):
        y = _series(rng, int(rng.integers(cp.MIN_POINTS, 160)), step)
        sigma = cp.noise_sigma(y) or 1e-12
        pen = cp.PENALTY_BIC_FACTOR * math.log(len(y)) * sigma**2
        algo = ruptures.Pelt(model="l2", min_size=cp.MIN_SEGMENT, jump=1).fit(y.reshape(-1, 1))
        assert cp._candidates(y, sigma) == algo.predict(pen=pen)[:-1]


@pytest.mark.parametrize(
    "y",
    [
        np.full(30, 3.0),  # constant: every cost is zero, never negative
        np.r_[np.zeros(20), 50.0, np.zeros(20)],  # one outlier
        np.random.default_rng().standard_normal(64) * 1e6 + 1e9,  # large offset
    ],
    ids=["constant", "outlier", "offset"],
)
def test_segment_costs_equal_cost_l2(y):
    fast = cp._l2_cost().fit(y.reshape(-1, 1))
    ref = ruptures.costs.CostL2().fit(y.reshape(-1, 1))
    for start, end in [(0, len(y)), (0, 2), (3, 17), (len(y) - 2, len(y))]:
        a, b = fast.error(start, end), float(ref.error(start, end))
        assert a >= 0.0
        assert a == pytest.approx(b, rel=REL_TOL, abs=1e-9 * max(1.0, float(np.var(y)) * len(y)))


@pytest.mark.parametrize("seed", [0, 5, 11])  # 0 and 11: detect() made a +15% step at commit 14
def test_a_step_at_the_newest_commit_alone_is_unconfirmed(seed):
    rng = np.random.default_rng(seed)

    def series(slow_from: int) -> list:
        return [
            20.0 * rng.lognormal(0, 0.03, 5) * (1.3 if i >= slow_from else 1) for i in range(16)
        ]

    older, newest = cp.detect_newest(series(15))
    assert older == [] and newest is not None and newest.index == 15
    assert 20 < newest.change_pct < 40
    older, newest = cp.detect_newest(series(14))  # two commits after it: a change point
    assert [c.index for c in older] == [14] and newest is None
    older, newest = cp.detect_newest(series(99))
    assert older == [] and newest is None
