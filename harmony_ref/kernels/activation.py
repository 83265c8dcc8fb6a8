"""SwiGLU's gate: silu(gate) * up, one kernel with its NumPy twin.

    y = silu_gate(gate, up)         gate, up (..., F) -> (..., F) float32
    silu(v) = v / (1 + exp(-v))

`silu_gate_rows` is the decoder's hot path: it reads one fused gate|up activation (T, 2F), the
output of a single matmul over the concatenated gate and up weights, and writes (T, F). Large
negative v gives exp(-v) = inf and silu = -0.0, as in the reference; NaN stays NaN.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from harmony_ref.kernels._checks import float32_array


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


@numba.njit(fastmath=False, cache=True)
def silu_gate_rows(gate_up, out):
    """out (T, F) = silu(gate_up[:, :F]) * gate_up[:, F:]. No checks (callers validate once)."""
    t_rows, f = out.shape
    for t in range(t_rows):
        for j in range(f):
            g = gate_up[t, j]
            out[t, j] = g / (np.float32(1.0) + np.float32(math.exp(-g))) * gate_up[t, f + j]
    return out


def silu_gate(gate, up) -> np.ndarray:
    """Kernel version of `silu_gate_ref`."""
    gate, up = _check(gate, up)
    f = gate.shape[-1]
    gu = np.concatenate([gate.reshape(-1, f), up.reshape(-1, f)], axis=1)
    out = np.empty((gu.shape[0], f), dtype=np.float32)
    return silu_gate_rows(gu, out).reshape(gate.shape)
