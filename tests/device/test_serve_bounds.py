"""Issue 16 item 4: serve's work is bounded (like thermal's steps) and its statistics stream."""

import numpy as np
import pytest

import harmony_ref.device.serve as serve_mod
from harmony_ref.cli import main
from harmony_ref.device.serve import (
    MAX_REQUESTS,
    constant_rate_service,
    load_trace,
    poisson_arrivals,
    simulate_serving,
)

FIXED = constant_rate_service(prefill_tokens_per_s=512.0, decode_tokens_per_s=16.0)


@pytest.mark.parametrize(
    "argv", [["--rate", "1e9"], ["--minutes", "1e9"], ["--rate", "1000", "--minutes", "1e4"]]
)
def test_huge_serve_runs_are_refused_with_the_limit(argv, capsys):
    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err
    assert f"{MAX_REQUESTS:,}" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--rate", "nan"],
        ["--rate", "inf"],
        ["--rate", "-1"],
        ["--minutes", "inf"],
        ["--minutes", "nan"],
    ],
)
def test_non_finite_serve_arguments_are_refused(argv, capsys):
    assert main(["serve", *argv]) == 2
    assert "must be" in capsys.readouterr().err


def test_poisson_refuses_before_generating():
    with pytest.raises(ValueError, match=f"{MAX_REQUESTS:,}"):
        poisson_arrivals(1e9, 600.0)


def test_a_trace_longer_than_the_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(serve_mod, "MAX_REQUESTS", 5)
    trace = tmp_path / "t.csv"
    trace.write_text("".join(f"{i},8,8\n" for i in range(6)))
    with pytest.raises(ValueError, match=r"t.csv: line 6: .*limit of 5 requests"):
        load_trace(trace)


def test_streamed_statistics_are_exact_and_keep_no_requests():
    reqs = poisson_arrivals(0.3, 3600.0, seed=3)
    kept = simulate_serving(reqs, FIXED, duration_s=3600.0)
    streamed = simulate_serving(reqs, FIXED, duration_s=3600.0, keep_outcomes=False)
    assert streamed.outcomes == [] and streamed.queue_len_samples == []
    assert streamed.summary() == kept.summary()
    done = [o.latency_s * 1000 for o in kept.outcomes if o.status == "completed"]
    assert kept.summary()["latency_p90_ms"] == pytest.approx(float(np.percentile(done, 90)))
