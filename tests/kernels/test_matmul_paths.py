"""Each x86 int8 dot-product path of matmul_w4 / matmul_w8 (every one this CPU runs) against the
portable loops, bit for bit: the arithmetic is integer up to the per-block float scaling, which
every path does in the same order. Awkward shapes, float16 and float32 scales, random and extreme
inputs (all -8 / all 7 nibbles, int8 weights at +-127 and -128, activations at +-127 and, fed to
the kernels directly, -128). Also: path choice from the CPU and from HARMONY_REF_MATMUL_ISA."""

import os
import subprocess
import sys

import numpy as np
import pytest

from harmony_ref.kernels import matmul as mm
from harmony_ref.kernels import matmul_x86 as x86
from harmony_ref.quant.int4 import Int4Tensor, quantize_int4
from harmony_ref.quant.int8 import Int8Tensor, quantize_int8

X86_PATHS = [i for i in mm.SUPPORTED_ISAS if i != mm.ISA_PORTABLE]
PATHS = pytest.mark.parametrize("isa", X86_PATHS, ids=lambda i: mm.ISA_NAMES[i])
SHAPES = [  # m, n, k, group: GEMV and GEMM row counts, N around the 64-row tile, K chunk edges
    (1, 1, 32, 32),
    (3, 63, 64, 32),
    (4, 65, 96, 32),
    (5, 130, 288, 32),
    (8, 64, 48, 48),
    (9, 7, 512, 128),
    (17, 129, 40, 8),
    (128, 70, 544, 32),
    (6, 33, 320, 64),
    (13, 3, 16, 16),
]


def _same(got, want, what):
    np.testing.assert_array_equal(got, want, err_msg=what)


def _on(fn, prepare, isa):
    return lambda x, t: fn(x, prepare(t, isa), isa)


def _w4(isa):
    return _on(mm._matmul_w4, mm._prepare_w4, isa)


def _w8(isa):
    return _on(mm._matmul_w8, mm._prepare_w8, isa)


def _random(m, n, k, seed):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((n, k)) * rng.uniform(0.01, 0.1, (n, 1))).astype(np.float32)
    x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 5.0, (m, 1))).astype(np.float32)
    x[:, : min(k, 32)] *= 100  # one block far louder than the rest
    return x, w


@pytest.mark.skipif(not X86_PATHS, reason="no x86 int8 dot-product path on this CPU")
def test_x86_paths_found_where_numba_targets_them():
    assert mm.ISA in mm.SUPPORTED_ISAS and mm.SUPPORTED_ISAS[0] == mm.ISA_PORTABLE


@PATHS
@pytest.mark.parametrize("m, n, k, group", SHAPES)
@pytest.mark.parametrize(
    "scheme, scale_dtype", [("asym", np.float16), ("sym", np.float16), ("asym", np.float32)]
)
def test_w4_path_equals_portable(isa, m, n, k, group, scheme, scale_dtype):
    x, w = _random(m, n, k, seed=m * 31 + n + k)
    t = quantize_int4(w, group, scheme, scale_dtype=scale_dtype)
    p = mm._prepare_w4(t, isa)
    assert p.layout == ("x86" if mm.act_block_for(group) % 8 == 0 else "rows")
    _same(_w4(isa)(x, t), _w4(mm.ISA_PORTABLE)(x, t), f"w4 {mm.ISA_NAMES[isa]}")


@PATHS
@pytest.mark.parametrize("m, n, k, group", SHAPES + [(2, 9, 36, 36), (5, 4, 12, 12)])
def test_w8_path_equals_portable(isa, m, n, k, group):
    x, w = _random(m, n, k, seed=m * 7 + n + k)
    t = quantize_int8(w)
    _same(_w8(isa)(x, t), _w8(mm.ISA_PORTABLE)(x, t), f"w8 {mm.ISA_NAMES[isa]}")


def _int4_constant(n, k, group, nibble, zp):
    """An Int4Tensor whose every stored level is `nibble` (-8..7), zero point `zp`."""
    byte = np.uint8(((nibble & 15) << 4) | (nibble & 15))
    g = k // group
    rng = np.random.default_rng(n + k)
    scale = rng.uniform(0.5, 2.0, (n, g)).astype(np.float16)
    zero = None if zp is None else np.full((n, g), zp, np.int8)
    scheme = "sym" if zero is None else "asym"
    return Int4Tensor(np.full((n, k // 2), byte), scale, zero, (n, k), group, scheme)


@PATHS
@pytest.mark.parametrize("nibble", [-8, 7])
@pytest.mark.parametrize("zp", [None, -128, 127])
@pytest.mark.parametrize("m", [1, 4, 7])
def test_w4_extreme_nibbles_and_activations(isa, nibble, zp, m):
    n, k = 67, 4096  # long K: the largest block sums, over many chunks
    t = _int4_constant(n, k, 32, nibble, zp)
    for level in (127.0, -127.0):
        x = np.full((m, k), level, np.float32)  # quantizes to +-127 everywhere
        x[m // 2, ::2] = -level  # and a row alternating between the extremes
        got, want = _w4(isa)(x, t), _w4(mm.ISA_PORTABLE)(x, t)
        _same(got, want, f"w4 {mm.ISA_NAMES[isa]} nibble {nibble} zp {zp} x {level}")
        np.testing.assert_allclose(got, mm.matmul_w4_ref(x, t), rtol=1e-5)


@PATHS
@pytest.mark.parametrize("value", [-127, 127, -128])
@pytest.mark.parametrize("m", [1, 4, 7])
def test_w8_extreme_values_and_activations(isa, value, m):
    n, k = 67, 4096
    values = np.full((n, k), value, np.int8)
    values[1, ::3] = 127
    t = Int8Tensor(values, np.random.default_rng(1).uniform(0.5, 2, n).astype(np.float32), (n, k))
    # AVX2's |x| * w sign(x) is exact only without -128 weights: such a tensor goes portable
    expect_layout = "rows" if isa == mm.ISA_AVX2 and value == -128 else "x86"
    assert mm._prepare_w8(t, isa).layout == expect_layout
    for level in (127.0, -127.0):
        x = np.full((m, k), level, np.float32)
        x[m // 2, 1::2] = -level
        got, want = _w8(isa)(x, t), _w8(mm.ISA_PORTABLE)(x, t)
        _same(got, want, f"w8 {mm.ISA_NAMES[isa]} value {value} x {level}")
        np.testing.assert_allclose(got, mm.matmul_w8_ref(x, t), rtol=1e-5)


def _portable_from_bytes(xq):
    return xq.astype(np.int32)


@PATHS
@pytest.mark.parametrize("m", [1, 8])
@pytest.mark.parametrize("xval", [-128, 127])
def test_kernels_on_int8_extremes_fed_directly(isa, m, xval):
    # The quantizer never writes -128, but the kernels' contract is any int8 activation.
    n, k = 70, 256
    xq = np.full((m, k), xval, np.int8)
    xq[:, 5::7] = -xval if xval != -128 else 127
    xs = np.random.default_rng(2).uniform(0.01, 1, (m, k // 32)).astype(np.float32)
    xsum = xq.astype(np.int32).reshape(m, -1, 32).sum(axis=2).astype(np.int32)
    t4 = _int4_constant(n, k, 32, -8, 127)
    p4x, p4 = mm._prepare_w4(t4, isa), mm._prepare_w4(t4, mm.ISA_PORTABLE)
    kern = x86._w4_gemm if m % x86.GEMM_ROWS == 0 else x86._w4_gemv
    got = kern(isa, xq.view(np.int32), xs, xsum, p4x.packed, p4x.scale, p4x.zero, 32, 32)
    want = mm._matmul_w4_tiles(
        _portable_from_bytes(xq), xs, xsum, p4.packed, p4.scale, p4.zero, 32, 32
    )
    _same(got, want, f"w4 kernel {mm.ISA_NAMES[isa]} x {xval}")
    values = np.full((n, k), 127, np.int8)
    values[::2] = -127
    t8 = Int8Tensor(values, np.ones(n, np.float32), (n, k))
    p8x, p8 = mm._prepare_w8(t8, isa), mm._prepare_w8(t8, mm.ISA_PORTABLE)
    kern = x86._w8_gemm if m % x86.GEMM_ROWS == 0 else x86._w8_gemv
    got = kern(isa, xq.view(np.int32), xs, xsum, p8x.values, p8x.scale, 32)
    want = mm._matmul_w8_tiles(_portable_from_bytes(xq), xs, p8.values, p8.scale, 32)
    _same(got, want, f"w8 kernel {mm.ISA_NAMES[isa]} x {xval}")


def test_activation_quantizers_agree():
    x, _ = _random(5, 1, 96, seed=3)
    x[2, :32] = 0.0
    a = mm._quantize_activations(x, 32)
    b = mm._quantize_activations_bytes(x, 32)
    _same(b[0].astype(np.int32), a[0], "xq")
    _same(b[1], a[1], "xs")
    _same(b[2], a[2], "xsum")


def test_isa_choice_and_forcing():
    supported = [mm.ISA_PORTABLE, mm.ISA_AVX2]
    assert mm._choose_isa(None, supported) == mm.ISA_AVX2
    assert mm._choose_isa("", supported) == mm.ISA_AVX2
    assert mm._choose_isa("Portable", supported) == mm.ISA_PORTABLE
    forced = r"HARMONY_REF_MATMUL_ISA='avx512vnni': this CPU runs portable, avx2"
    with pytest.raises(RuntimeError, match=forced):
        mm._choose_isa("avx512vnni", supported)
    with pytest.raises(RuntimeError, match="HARMONY_REF_MATMUL_ISA='sse9'"):
        mm._choose_isa("sse9", supported)


def _python(code, **env):
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_env_var_forces_the_path_and_generic_cpu_gets_portable():
    code = "from harmony_ref.kernels import matmul as m; print(m.ISA_NAMES[m.ISA])"
    assert _python(code, HARMONY_REF_MATMUL_ISA="portable") == "portable"
    # numba compiling for a generic x86-64 (no features) must not be handed x86 intrinsics (the
    # features emptied too: an emulated-CPU run, tests/emulated_cpus.py, sets its own list)
    assert (
        _python(code, NUMBA_CPU_NAME="generic", NUMBA_CPU_FEATURES="", HARMONY_REF_MATMUL_ISA="")
        == "portable"
    )
