"""The gated FFN's activations, each kernel with its NumPy twin: SwiGLU's silu(gate) * up and
GeGLU's gelu_tanh(gate) * up (Gemma).

    y = silu_gate(gate, up)         gate, up (..., F) -> (..., F) float32
    y = gelu_tanh_gate(gate, up)
    silu(v) = v / (1 + exp(-v))
    gelu_tanh(v) = 0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3)))   (PyTorch's approximate="tanh")

The GELU kernel uses norm.py's rational tanh (the fused norm-bias-GELU kernel's), so it differs
from the twin's np.tanh by at most that approximation's error (tests bound it).

`silu_gate_rows` is the decoder's hot path: it reads one fused gate|up activation (T, 2F), the
output of a single matmul over the concatenated gate and up weights, and writes (T, F). Its exp
is norm.py's vectorisable `exp32` (within a float32 ulp of exp). Large negative v gives
exp(-v) = inf and silu = -0.0, as in the reference; NaN stays NaN. Each `*_rows` kernel has a
`*_rows_par` twin loop over the same inlined row body with its rows split between threads, for
prefill (norm.py's PARALLEL_MIN_ROWS).
"""

from __future__ import annotations

import numba
import numpy as np

from harmony_ref.kernels._checks import float32_array
from harmony_ref.kernels.norm import GELU_CUBIC, GELU_TANH_SCALE, _gelu1, exp32


def _check(gate, up):
    gate = float32_array(gate, "gate", (1, 2, 3))
    up = float32_array(up, "up", (1, 2, 3))
    if gate.shape != up.shape:
        raise ValueError(f"gate {gate.shape} and up {up.shape} must have the same shape")
    return gate, up


def silu_gate_ref(gate, up) -> np.ndarray:
    gate, up = _check(gate, up)
    with np.errstate(over="ignore"):
        return (gate / (np.float32(1) + np.exp(-gate)) * up).astype(np.float32)


@numba.njit(inline="always", fastmath=False, error_model="numpy")
def _silu_gate_row(gate_up, t, out):
    f = out.shape[1]
    for j in range(f):
        g = gate_up[t, j]
        out[t, j] = g / (np.float32(1.0) + exp32(-g)) * gate_up[t, f + j]


@numba.njit(fastmath=False, error_model="numpy", cache=True)
def silu_gate_rows(gate_up, out):
    """out (T, F) = silu(gate_up[:, :F]) * gate_up[:, F:]. No checks (callers validate once).
    exp is norm.py's `exp32` and the error model numpy's (no ZeroDivisionError branch; 1 + e^-g
    is never 0), so the loop vectorises: libm's scalar exp was ~3 ns a value (SmolLM2-135M at
    128 tokens: 17 ms of a 160 ms prefill, cProfile, AMD EPYC Zen 4, 1 thread)."""
    for t in range(out.shape[0]):
        _silu_gate_row(gate_up, t, out)
    return out


@numba.njit(parallel=True, fastmath=False, error_model="numpy", cache=True)
def silu_gate_rows_par(gate_up, out):
    """`silu_gate_rows` with its rows split between threads (prefill)."""
    for t in numba.prange(out.shape[0]):
        _silu_gate_row(gate_up, t, out)
    return out


def _gated(rows_kernel, gate, up) -> np.ndarray:
    """Run a fused gate|up row kernel on separate gate and up arrays (..., F)."""
    gate, up = _check(gate, up)
    f = gate.shape[-1]
    gu = np.concatenate([gate.reshape(-1, f), up.reshape(-1, f)], axis=1)
    out = np.empty((gu.shape[0], f), dtype=np.float32)
    return rows_kernel(gu, out).reshape(gate.shape)


def silu_gate(gate, up) -> np.ndarray:
    """Kernel version of `silu_gate_ref`."""
    return _gated(silu_gate_rows, gate, up)


def gelu_tanh_gate_ref(gate, up) -> np.ndarray:
    gate, up = _check(gate, up)
    inner = GELU_TANH_SCALE * (gate + GELU_CUBIC * gate * gate * gate)
    return (np.float32(0.5) * gate * (np.float32(1) + np.tanh(inner)) * up).astype(np.float32)


@numba.njit(inline="always", fastmath=True, error_model="numpy")
def _gelu_tanh_gate_row(gate_up, t, out):
    f = out.shape[1]
    for j in range(f):
        out[t, j] = _gelu1(gate_up[t, j]) * gate_up[t, f + j]


@numba.njit(fastmath=True, error_model="numpy", cache=True)
def gelu_tanh_gate_rows(gate_up, out):
    """out (T, F) = gelu_tanh(gate_up[:, :F]) * gate_up[:, F:]. No checks. numpy's error model
    (no ZeroDivisionError check: the rational tanh's denominator is >= B0 > 0) lets LLVM
    vectorize the loop (16 lanes a zmm): under Python's, every division branched to a possible
    raise and the loop stayed scalar, 1.2 ms a Gemma 3 270M layer at 128 tokens (cProfile, AMD
    EPYC Zen 4, 1 thread). Vectorized, fastmath's reciprocal estimate moves results by an ulp or
    so against the scalar loop, inside the tanh approximation's bound."""
    for t in range(out.shape[0]):
        _gelu_tanh_gate_row(gate_up, t, out)
    return out


@numba.njit(parallel=True, fastmath=True, error_model="numpy", cache=True)
def gelu_tanh_gate_rows_par(gate_up, out):
    """`gelu_tanh_gate_rows` with its rows split between threads (prefill)."""
    for t in numba.prange(out.shape[0]):
        _gelu_tanh_gate_row(gate_up, t, out)
    return out


def gelu_tanh_gate(gate, up) -> np.ndarray:
    """Kernel version of `gelu_tanh_gate_ref`."""
    return _gated(gelu_tanh_gate_rows, gate, up)
