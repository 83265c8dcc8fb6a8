"""GPTQ (quant/gptq.py): the fast path (Cholesky of H^-1, lazy block updates, groups fitted as the
columns go) equals the slow reference that re-solves the free columns from scratch before each
column (the Optimal Brain Surgeon update written from the paper's equations); one OBS step
checked against brute-force least squares; with an identity Hessian GPTQ is round-to-nearest
bit for bit; its output error on the calibration inputs is never above RTN's; the stored
tensors are the formats the kernels run."""

import numpy as np
import pytest

from harmony_ref.quant.gptq import gptq_quantize, gptq_quantize_ref, hessian, output_error
from harmony_ref.quant.int4 import Int4Tensor, dequantize_int4, quantize_int4_ref
from harmony_ref.quant.int8 import Int8Tensor, quantize_int8_ref
from harmony_ref.quant.policy import parse_format

FORMATS = ["int4-g8", "int4-g16-sym", "int4-g32", "int8"]


def _inputs(seed, n_tokens=256, k=32, outliers=True):
    """Correlated inputs with a few large channels, like a transformer's activations."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_tokens, k)) @ rng.standard_normal((k, k)) * 0.4
    x += rng.standard_normal((n_tokens, k))
    if outliers:
        x[:, rng.choice(k, 3, replace=False)] *= 8
    return x


def _rtn(w, fmt):
    if fmt.kind == "int8":
        t = quantize_int8_ref(w)
        return t.values.astype(np.float32) * t.scale[:, None]
    return dequantize_int4(quantize_int4_ref(w, fmt.group_size, fmt.scheme))


def _codes(t):
    return t.values if isinstance(t, Int8Tensor) else t.packed


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("act_order", [False, True])
def test_fast_path_equals_the_reference(fmt, act_order):
    fmt = parse_format(fmt)
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 32)).astype(np.float32)
    h, _ = hessian(_inputs(2))
    fast = gptq_quantize(w, h, fmt, block_size=8, act_order=act_order, dtype=np.float64)
    ref = gptq_quantize_ref(w, h, fmt, act_order=act_order)
    assert np.array_equal(_codes(fast.stored), _codes(ref.stored))
    assert np.array_equal(fast.stored.scale, ref.stored.scale)
    assert fast.dequantized.tobytes() == ref.dequantized.tobytes()
    # float32 weights (the default) give the same codes but for a rare rounding tie
    f32 = gptq_quantize(w, h, fmt, block_size=8, act_order=act_order)
    assert (_codes(f32.stored) == _codes(ref.stored)).mean() >= 0.97


def test_block_size_does_not_change_the_result():
    fmt = parse_format("int4-g8")
    w = np.random.default_rng(3).standard_normal((5, 32)).astype(np.float32)
    h, _ = hessian(_inputs(4))
    a, b = (gptq_quantize(w, h, fmt, block_size=bs, dtype=np.float64) for bs in (8, 32))
    assert np.array_equal(a.stored.packed, b.stored.packed)


def test_one_step_is_the_brute_force_obs_update():
    """After the first column is fixed at its quantized value, the rest move to the least-squares
    optimum of the layer output (the OBS step), found here by lstsq on the inputs themselves."""
    fmt = parse_format("int8")
    rng = np.random.default_rng(5)
    x = _inputs(6, n_tokens=64, k=8)
    w = rng.standard_normal((3, 8)).astype(np.float32)
    damp = 1e-9  # (nearly) undamped: the OBS step on H = 2 X^T X itself
    h, _ = hessian(x)
    q0 = _rtn(w, fmt)[:, 0]  # column 0 is quantized first with the row scale
    # brute force: minimise ||X w^T - X w'^T|| over w'[1:] with w'[0] = q0
    target = x @ w.astype(np.float64).T - np.outer(x[:, 0], q0)  # (n, rows)
    rest, *_ = np.linalg.lstsq(x[:, 1:], target, rcond=None)  # (7, rows)
    # GPTQ's update of the remaining columns, from the reference's first step
    hd = h + damp * np.mean(np.diag(h)) * np.eye(8)
    e0 = q0 - w[:, 0]
    obs = w[:, 1:] - np.outer(e0, hd[0, 1:]) @ np.linalg.inv(hd[1:, 1:])
    assert np.allclose(obs, rest.T, rtol=1e-6, atol=1e-6)
    # and GPTQ quantizes column 1 at that updated value
    g = gptq_quantize(w, h, fmt, damp=damp, dtype=np.float64)
    scale = quantize_int8_ref(w).scale
    assert np.array_equal(g.stored.values[:, 0], np.rint(w[:, 0] / scale))
    assert np.array_equal(g.stored.values[:, 1], np.clip(np.rint(rest.T[:, 0] / scale), -127, 127))


def test_identity_hessian_is_round_to_nearest():
    """No correlations, no update: every group's scale comes from the weights as read."""
    w = np.random.default_rng(7).standard_normal((8, 64)).astype(np.float32)
    for name in ("int4-g32", "int4-g16-sym"):
        fmt = parse_format(name)
        r = gptq_quantize(w, np.eye(64), fmt)
        t = quantize_int4_ref(w, fmt.group_size, fmt.scheme)
        assert np.array_equal(r.stored.packed, t.packed)
        assert np.array_equal(r.stored.scale, t.scale)
    r = gptq_quantize(w, np.eye(64), parse_format("int8"))
    assert np.array_equal(r.stored.values, quantize_int8_ref(w).values)


@pytest.mark.parametrize("fmt", FORMATS)
def test_output_error_never_above_rtn(fmt):
    fmt = parse_format(fmt)
    for seed in range(8):
        rng = np.random.default_rng(100 + seed)
        x = _inputs(seed, n_tokens=128, k=64, outliers=bool(seed % 2))
        w = rng.standard_normal((16, 64)).astype(np.float32)
        h, _ = hessian(x)
        for act_order in (False, True):
            g = gptq_quantize(w, h, fmt, act_order=act_order)
            assert output_error(w, g.dequantized, x) <= output_error(w, _rtn(w, fmt), x), (
                seed,
                act_order,
            )


def test_stored_formats_and_dead_columns():
    fmt = parse_format("int4-g16")
    x = _inputs(8, k=32)
    x[:, 5] = 0  # a channel no token uses
    w = np.random.default_rng(9).standard_normal((4, 32)).astype(np.float32)
    r = gptq_quantize(w, hessian(x)[0], fmt)
    assert isinstance(r.stored, Int4Tensor) and r.stored.format_name == "int4-g16-asym"
    assert r.stored.scale.dtype == np.float16 and r.stored.zero_point.dtype == np.int8
    assert np.array_equal(r.dequantized, dequantize_int4(r.stored))
    assert np.isfinite(r.loss)


def test_bad_input_names_the_problem():
    w = np.ones((2, 8), np.float32)
    with pytest.raises(ValueError, match=r"hessian has shape \(4, 4\), expected \(8, 8\)"):
        gptq_quantize(w, np.eye(4), parse_format("int8"))
    with pytest.raises(ValueError, match="int4-gNN or int8, not fp16"):
        gptq_quantize(w, np.eye(8), parse_format("fp16"))
    with pytest.raises(ValueError, match="damp"):
        gptq_quantize(w, np.eye(8), parse_format("int8"), damp=0)
    with pytest.raises(ValueError, match="NaN/Inf"):
        hessian(np.array([[np.nan, 1.0]]))
