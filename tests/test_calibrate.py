"""Calibration fit: recovers known launch overhead, rates and bandwidth from synthetic op times
(with and without noise), keeps seeds for unknowns no op constrains, and reports held-out MAPE."""

import numpy as np
import pytest

from harmony_ref.hil.calibrate import OpSample, fit, mape_pct

TRUE = dict(launch_s=20e-6, rates={"int4": 40e9, "int8": 30e9, "fp16": 80e9, "vector": 5e9}, bw=20e9)
SEED_RATES = {"int4": 10e9, "int8": 10e9, "fp16": 10e9, "vector": 1e9}
RECOVER_REL = 1e-6  # noise-free data: exact up to nnls round-off
NOISY_REL = 0.10  # 3% multiplicative noise: parameters within 10%


def true_time(cls, ops, nbytes, launches):
    return launches * TRUE["launch_s"] + max(ops / TRUE["rates"][cls], nbytes / TRUE["bw"])


def synthetic(noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for cls, bpw in (("int4", 0.5625), ("int8", 1.0), ("fp16", 4.0)):
        for i, (m, n, k) in enumerate([(1, 512, 512), (1, 2048, 2048), (1, 4096, 4096), (16, 2048, 2048),
                                       (64, 2048, 2048), (1, 1024, 4096), (8, 4096, 1024)]):
            ops, nbytes = 2.0 * m * n * k, n * k * bpw + 4 * m * (n + k)
            t = true_time(cls, ops, nbytes, 1) * (1 + noise * rng.standard_normal())
            out.append(OpSample(f"{cls}_m{m}_n{n}_k{k}", cls, ops, nbytes, 1, t, holdout=i % 3 == 2))
    for i, (rows, h) in enumerate([(1, 1024), (16, 2048), (64, 4096), (256, 4096), (4, 512)]):
        ops, nbytes = 12.0 * rows * h, 8.0 * rows * h + 8 * h
        for launches in (1, 3):
            t = true_time("vector", ops, nbytes * (1 if launches == 1 else 3), launches) * (1 + noise * rng.standard_normal())
            out.append(OpSample(f"norm_l{launches}_{rows}x{h}", "vector", ops, nbytes * (1 if launches == 1 else 3),
                                launches, t, holdout=i == 4))
    out.append(OpSample("empty", "vector", 0.0, 0.0, 1, TRUE["launch_s"]))
    return out


def test_recovers_known_parameters_exactly():
    f = fit(synthetic(), seed_bandwidth=5e9, seed_rates=SEED_RATES)
    assert f.launch_s == pytest.approx(TRUE["launch_s"], rel=RECOVER_REL)
    assert f.bandwidth_bytes_per_s == pytest.approx(TRUE["bw"], rel=RECOVER_REL)
    for c, r in TRUE["rates"].items():
        assert f.rates[c] == pytest.approx(r, rel=RECOVER_REL), c
    assert set(f.fitted) == {"launch", "int4", "int8", "fp16", "vector", "bandwidth"}
    # the fp16 GEMV of 4096x4096 is memory-bound under the true numbers, the int4 GEMM compute-bound
    assert f.regimes["fp16_m1_n4096_k4096"] == "memory"
    assert f.regimes["int4_m64_n2048_k2048"] == "compute"


def test_noisy_fit_and_heldout_mape():
    ops = synthetic(noise=0.03, seed=1)
    f = fit(ops, seed_bandwidth=5e9, seed_rates=SEED_RATES)
    assert f.launch_s == pytest.approx(TRUE["launch_s"], rel=NOISY_REL)
    assert f.rates["int4"] == pytest.approx(TRUE["rates"]["int4"], rel=NOISY_REL)
    held = [(f.predict_s(op), op.time_s) for op in ops if op.holdout]
    assert len(held) >= 5
    assert mape_pct(held) < 8.0


def test_unconstrained_unknown_keeps_its_seed():
    ops = [op for op in synthetic() if op.rate_class != "int8"]
    f = fit(ops, seed_bandwidth=5e9, seed_rates=SEED_RATES)
    assert "int8" not in f.fitted
    assert f.rates["int8"] == SEED_RATES["int8"]


def test_fit_needs_enough_ops():
    with pytest.raises(ValueError, match="at least 3"):
        fit(synthetic()[:2], 5e9, SEED_RATES)


def test_bad_sample():
    with pytest.raises(ValueError, match="time_s"):
        OpSample("x", "int4", 1.0, 1.0, 1, 0.0)
    with pytest.raises(ValueError, match="rate_class"):
        OpSample("x", "fp8", 1.0, 1.0, 1, 1.0)
