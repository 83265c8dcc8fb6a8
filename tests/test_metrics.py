"""harmony_ref.metrics: the one APE/MAPE helper every model-vs-measurement error goes through."""

import math

import pytest

from harmony_ref.metrics import ape_pct, mape_pct


def test_ape_is_relative_to_the_measurement_and_symmetric_in_sign():
    assert ape_pct(110.0, 100.0) == pytest.approx(10.0)
    assert ape_pct(90.0, 100.0) == pytest.approx(10.0)
    assert ape_pct(100.0, 100.0) == 0.0
    assert ape_pct(0.0, 4.0) == 100.0  # a model that predicts nothing is 100% off


def test_mape_is_the_mean_of_the_apes():
    pairs = [(110.0, 100.0), (1.0, 2.0), (3.0, 3.0)]
    assert mape_pct(pairs) == pytest.approx((10.0 + 50.0 + 0.0) / 3)
    assert mape_pct(iter(pairs)) == mape_pct(pairs)  # any iterable, read once


def test_mape_of_nothing_is_an_error_not_zero_or_nan():
    with pytest.raises(ValueError, match="empty set"):
        mape_pct([])
    with pytest.raises(ValueError, match="empty set"):
        mape_pct(p for p in [])


@pytest.mark.parametrize("measured", [0.0, -1.0, math.nan, math.inf])
def test_a_measurement_that_cannot_be_scored_against_is_an_error(measured):
    with pytest.raises(ValueError, match="must be finite and > 0"):
        ape_pct(1.0, measured)
    with pytest.raises(ValueError, match="must be finite and > 0"):
        mape_pct([(1.0, 1.0), (1.0, measured)])
