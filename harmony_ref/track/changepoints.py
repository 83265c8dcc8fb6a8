"""Change points in a metric's series over commits: where its level moved, how much, how sure.

Input is one point per commit, in commit order, each with its raw samples (a record's samples, or
its value when it has none). The detector:

1. Candidates: PELT (ruptures, `Pelt(model="l2")`, Killick, Fearnhead & Eckley 2012) on the log
   of each point's median. Logs make a step a relative size and lognormal noise symmetric; the
   penalty is `PENALTY_BIC_FACTOR` x log(n) x sigma^2, sigma the noise of a point's median,
   estimated robustly from the successive differences (MAD / 0.6745 / sqrt 2, so a step adds one
   outlying difference and does not inflate it).
2. Significance: each candidate is tested on the raw samples of the two segments it separates
   (from the previous change point to the next) with a two-sided Mann-Whitney U test (SciPy);
   a candidate with p >= `ALPHA` is dropped and the neighbours are tested again over the merged
   segments, until every change point left is significant.
3. Where: the commits whose split costs at most chi2(1, 0.95) x sigma^2 more than the best split
   of the same two segments (a profile-likelihood confidence set for the location): the first
   commit after the change lies in that range.
4. How much: the ratio of the geometric means of the raw samples, after / before - 1 in %, with
   a 95% Welch t-interval on their logs (cheap at any sample count, and the scale the detector
   works on). The medians of both sides are reported beside it.

Why this method: PELT finds any number of change points in one exact pass (binary segmentation
can miss two close steps), ruptures is maintained and pure NumPy here; MongoDB's
signal-processing-algorithms (E-Divisive means) pins numpy below 2 and pulls gevent. The U test
on raw samples is the gate's own test (track/gate.py), so a change point and a gate failure mean
the same thing. The false-alarm rate and the power are measured by tools/changepoint_sim.py and
written in docs/how-to/find-the-commit.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# x log(n) x sigma^2. tools/changepoint_sim.py, 2000 series of 60 commits with 5 samples each:
# 3.0 gave 0.7% false alarms, 4.0 gave 0.2%, both found 99.9% of 8% steps
PENALTY_BIC_FACTOR = 4.0
ALPHA = 0.001  # two-sided U test on the raw samples of the two sides
MIN_POINTS = 4  # fewer commits than this: no change point can be told from noise
MIN_SEGMENT = 2  # commits on each side of a change point
LOCATION_CHI2 = 3.841  # chi2(1) 95% quantile: the location's confidence set


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first point after the change
    lo: int  # the first point after the change lies in points[lo..hi]
    hi: int
    before_median: float
    after_median: float
    change_pct: float  # geometric-mean ratio after / before - 1, in %
    ci_pct: tuple[float, float]
    p_value: float


def noise_sigma(y: np.ndarray) -> float:
    """The noise of one point of `y`, from its successive differences (robust to steps)."""
    d = np.diff(y)
    if len(d) == 0:
        return 0.0
    return float(np.median(np.abs(d - np.median(d))) / 0.6745 / math.sqrt(2))


def _l2_cost():
    """ruptures' least-squares segment cost (its `CostL2`: n x variance) for one column, from
    running sums: O(1) a segment instead of a pass over it. PELT asks for ~80,000 segments on
    500 commits, and CostL2's `var()` a call was the slowest part of `history` (1.4 s of 2.7 s).
    The sums are Python floats (NumPy scalar arithmetic costs microseconds a call) of the centred
    signal, so they stay exact to float64 rounding; the breakpoints are CostL2's."""
    from ruptures.base import BaseCost
    from ruptures.exceptions import NotEnoughPoints

    class CostL2Sums(BaseCost):
        model = "l2"

        def __init__(self):
            self.min_size = 1
            self.signal = None
            self.s1: list[float] = []
            self.s2: list[float] = []

        def fit(self, signal):
            self.signal = np.asarray(signal, dtype=float).reshape(len(signal), -1)
            if self.signal.shape[1] != 1:
                raise ValueError("CostL2Sums: one column only")
            y = self.signal[:, 0] - self.signal[:, 0].mean()
            self.s1 = [0.0, *np.cumsum(y).tolist()]
            self.s2 = [0.0, *np.cumsum(y * y).tolist()]
            return self

        def error(self, start, end):
            n = end - start
            if n < self.min_size:
                raise NotEnoughPoints
            d = self.s1[end] - self.s1[start]
            return max(self.s2[end] - self.s2[start] - d * d / n, 0.0)

    return CostL2Sums()


def _candidates(y: np.ndarray, sigma: float) -> list[int]:
    import ruptures

    pen = PENALTY_BIC_FACTOR * math.log(len(y)) * sigma**2
    algo = ruptures.Pelt(custom_cost=_l2_cost(), min_size=MIN_SEGMENT, jump=1)
    algo.fit(y.reshape(-1, 1))
    return [int(b) for b in algo.predict(pen=pen)[:-1]]  # the last breakpoint is len(y)


def _pooled(samples: list[np.ndarray], a: int, b: int) -> np.ndarray:
    return np.concatenate(samples[a:b])


def _u_p(before: np.ndarray, after: np.ndarray) -> float:
    from scipy.stats import mannwhitneyu

    if min(len(before), len(after)) < 2:
        return 1.0
    return float(mannwhitneyu(after, before, alternative="two-sided").pvalue)


def _location(y: np.ndarray, a: int, b: int, best: int, sigma: float) -> tuple[int, int]:
    """The split points k in (a, b) whose two-segment squared error is within the chi2 bound of
    the best split's."""

    def cost(k: int) -> float:
        left, right = y[a:k], y[k:b]
        return float(((left - left.mean()) ** 2).sum() + ((right - right.mean()) ** 2).sum())

    ks = range(a + 1, b)
    costs = {k: cost(k) for k in ks}
    bound = costs[best] + LOCATION_CHI2 * max(sigma, 1e-12) ** 2
    inside = [k for k in ks if costs[k] <= bound]
    return min(inside), max(inside)


def change_interval(before: np.ndarray, after: np.ndarray) -> tuple[float, float, float]:
    """(change, 95% CI low, high) in %: the geometric-mean ratio after / before - 1, with a Welch
    t-interval on the logs of the raw samples (the scale the detector works on; lognormal noise is
    normal there)."""
    from scipy.stats import t

    la, lb = np.log(after), np.log(before)
    diff = float(la.mean() - lb.mean())
    if min(len(la), len(lb)) < 2:
        return 100.0 * math.expm1(diff), math.nan, math.nan
    va, vb = la.var(ddof=1) / len(la), lb.var(ddof=1) / len(lb)
    se = math.sqrt(va + vb)
    if se == 0.0:
        return (100.0 * math.expm1(diff),) * 3
    df = (va + vb) ** 2 / (va**2 / (len(la) - 1) + vb**2 / (len(lb) - 1))
    half = float(t.ppf(0.975, df)) * se
    return tuple(100.0 * math.expm1(x) for x in (diff, diff - half, diff + half))  # type: ignore[return-value]


def detect(samples: list) -> list[ChangePoint]:
    """The significant change points of a series: `samples[i]` the raw samples (positive
    numbers) of the i-th commit in commit order. Returned oldest first."""
    pts = [np.asarray(s, dtype=float) for s in samples]
    if len(pts) < MIN_POINTS:
        return []
    if any(len(s) == 0 for s in pts):
        raise ValueError("detect: every point needs at least one sample")
    if any((s <= 0).any() for s in pts):
        raise ValueError("detect: samples must be positive (the detector works on their logs)")
    y = np.log([float(np.median(s)) for s in pts])
    sigma = noise_sigma(y)
    if sigma == 0.0:
        sigma = float(np.std(y)) or 1e-12
    cps = _candidates(y, sigma)
    while True:  # drop the least significant until every one left is significant
        bounds = [0, *cps, len(pts)]
        ps = [
            _u_p(_pooled(pts, bounds[i], bounds[i + 1]), _pooled(pts, bounds[i + 1], bounds[i + 2]))
            for i in range(len(cps))
        ]
        if not ps or max(ps) < ALPHA:
            break
        cps.pop(int(np.argmax(ps)))
    out = []
    bounds = [0, *cps, len(pts)]
    for i, k in enumerate(cps):
        a, b = bounds[i], bounds[i + 2]
        before, after = _pooled(pts, a, k), _pooled(pts, k, b)
        lo, hi = _location(y, a, b, k, sigma)
        b_med, a_med = float(np.median(before)), float(np.median(after))
        change, lo_pct, hi_pct = change_interval(before, after)
        out.append(
            ChangePoint(
                index=k,
                lo=lo,
                hi=hi,
                before_median=b_med,
                after_median=a_med,
                change_pct=change,
                ci_pct=(lo_pct, hi_pct),
                p_value=ps[i],
            )
        )
    return out


def detect_newest(samples: list) -> tuple[list[ChangePoint], ChangePoint | None]:
    """detect(), and a step at the newest point alone, which detect() cannot report (a change
    point needs MIN_SEGMENT commits a side): it pulls the newest point into a made-up change
    point (a small step some commits back, or one at the commit before it). When the newest point
    differs (U test p < ALPHA) from the points since the change point before it, and the point
    before it does not, the change points are those of the series without it and the second
    value is the newest point against the segment before it: a change one commit cannot
    confirm. Otherwise (detect(samples), None)."""
    cps = detect(samples)
    pts = [np.asarray(s, dtype=float) for s in samples]
    n = len(pts)
    if n - 1 < MIN_SEGMENT:
        return cps, None
    # cheap first look: the newest point against the segment of the point before it
    starts = [0, *(c.index for c in cps if c.index < n - 2)]
    if _u_p(_pooled(pts, starts[-1], n - 1), pts[-1]) >= ALPHA:
        return cps, None
    older = detect(samples[:-1])
    start = older[-1].index if older else 0
    before = _pooled(pts, start, n - 1)
    p = _u_p(before, pts[-1])
    if n - 1 - start < MIN_SEGMENT or p >= ALPHA:
        return cps, None
    if n - 2 - start >= MIN_SEGMENT and _u_p(_pooled(pts, start, n - 2), pts[-2]) < ALPHA:
        return cps, None  # the point before it moved too: a step of two commits, detect's
    change, lo_pct, hi_pct = change_interval(before, pts[-1])
    newest = ChangePoint(
        index=n - 1,
        lo=n - 1,
        hi=n - 1,
        before_median=float(np.median(before)),
        after_median=float(np.median(pts[-1])),
        change_pct=change,
        ci_pct=(lo_pct, hi_pct),
        p_value=p,
    )
    return older, newest
