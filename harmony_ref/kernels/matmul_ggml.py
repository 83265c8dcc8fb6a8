"""Matmuls over GGUF's block formats (quant/ggml.py: q4_0, q4_1, q8_0), with their NumPy twin.

    p = prepare_ggml(t)              # GGMLTensor -> the kernel's operand, built once per tensor
    y = matmul_ggml(x, p)            # x (M, K) or (K,) float -> (M, N) or (N,) float32
    matmul_ggml_ref(x, t)            # what the kernel computes, plain NumPy

What they compute is llama.cpp's vec_dot for each type against Q8_0 activations: x quantized to
int8 per 32-block once per call (xs = max|block| / 127, the same quantizer as matmul_w4/w8), an
integer dot per block, then the block's scales: y = x_hat @ W_hat.T up to float32 rounding.

    q4_0  sum_b d_b xs_b isum_b(u - 8, xq)
    q4_1  sum_b d_b xs_b isum_b(u, xq) + m_b xs_b sum_b(xq)
    q8_0  sum_b d_b xs_b isum_b(q, xq)   (matmul_kquant's, below)

Kernels, "where the layout allows" the existing int8-dot ones:
- q4_0 is group-wise symmetric INT4 with group 32 and a float16 scale, so it runs on matmul_w4
  (VNNI / AVX2 / portable paths, kernels/matmul.py) after one repack of the nibbles into
  Int4Tensor's order (ggml: byte j = u_j | u_{j+16} << 4; ours: 2j high, 2j+1 low; q = u - 8).
- q4_1 and q8_0 run on kernels/matmul_kquant.py's 32-block kernel (the file's nibbles or bytes
  and float16 d / m as they are, the same 32-block activation quantizer, d u xq and m xsum per
  block in one pass: llama.cpp's q4_1 vec_dot form), whose `_ref` defines their float order (per
  block, float32, not float64 as above). q8_0's per-32-block scale is also what matmul_w8's
  per-row layout cannot carry.
- A mixed Q4_0 / Q4_1 operand (prepare_q4_rows) runs matmul_w4 over u - 8 with scale d, plus
  the per-block constant c_b = 8 d_b + m_b times the block sums of x_hat: (M, K / 32) @
  (K / 32, N), 1/32 of the work, in a Numba loop (not BLAS: see _add_block_constants).
  (w' = u d + m = (u - 8) d + c.)
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numba
import numpy as np

from harmony_ref.kernels.matmul import (
    ACT_BLOCK,
    _as_activations,
    matmul_w4,
    prepare_w4,
    quantize_activations_ref,
)
from harmony_ref.kernels.matmul_kquant import (
    PreparedKQuant,
    matmul_kquant,
    matmul_kquant_ref,
    prepare_kquant,
)
from harmony_ref.kernels.matmul_portable import _quantize_activations
from harmony_ref.quant.ggml import QK, GGMLTensor
from harmony_ref.quant.int4 import Int4Tensor

Q4_OFFSET = 8  # u (0..15) = q + 8
KQUANT_FORM = ("q4_1", "q8_0")  # run by matmul_kquant (its x86-32 layout), numerics its `_ref`'s

assert ACT_BLOCK == QK  # one activation block per weight block


@dataclass(frozen=True, eq=False)
class PreparedGGML:
    """The operand of one q4_0 matrix or a mixed Q4_0 / Q4_1 one (prepare_q4_rows): `w4`
    (PreparedW4 of u - 8, scale d) and `c` ((N, K / 32) float32, q4_1's 8 d + m). A q4_1 or q8_0
    matrix's operand alone is matmul_kquant's."""

    qtype: str
    shape: tuple[int, int]
    w4: object = None
    c: np.ndarray | None = None
    nbytes: int = (
        0  # the GGUF bytes it was built from (prepare_q4_rows: no single tensor holds them)
    )


_prepared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def as_int4(t: GGMLTensor) -> Int4Tensor:
    """q4_0 / q4_1 nibbles as a symmetric g32 Int4Tensor of u - 8 with scale d (float16)."""
    n, k = t.shape
    q = t.levels().astype(np.int16) - Q4_OFFSET  # (N, K) in [-8, 7]
    nib = (q & 0x0F).astype(np.uint8)
    packed = (nib[:, 0::2] << 4) | nib[:, 1::2]  # (N, K // 2): even index -> high nibble
    return Int4Tensor(
        np.ascontiguousarray(packed), np.ascontiguousarray(t.d), None, (n, k), QK, "sym"
    )


def prepare_ggml(t) -> PreparedGGML | PreparedKQuant:
    """Kernel operand of `t`, built once per tensor object and cached (weakly) on it."""
    if isinstance(t, (PreparedGGML, PreparedKQuant)):
        return t
    if not isinstance(t, GGMLTensor):
        raise ValueError(f"w must be a GGMLTensor or PreparedGGML, got {type(t).__name__}")
    if t.qtype in KQUANT_FORM:
        return prepare_kquant(t)
    done = _prepared.get(t)
    if done is None:
        done = _prepared[t] = _prepare(t)
    return done


def _prepare(t: GGMLTensor) -> PreparedGGML:
    c = None
    if t.qtype == "q4_1":
        d = t.d.astype(np.float32)
        c = np.ascontiguousarray(np.float32(Q4_OFFSET) * d + t.m.astype(np.float32))
    return PreparedGGML(t.qtype, t.shape, w4=prepare_w4(as_int4(t)), c=c)


Q4_TYPES = ("q4_0", "q4_1")


def prepare_q4_rows(tensors: list[GGMLTensor]) -> PreparedGGML:
    """One operand for Q4_0 and Q4_1 matrices of one row length, rows concatenated: a Q4_0 block
    is a Q4_1 block whose constant term c = 8 d + m is 0 (w = (u - 8) d), so a mixed q|k|v or
    gate|up runs as one matmul_w4 call plus one constant pass instead of one call per part. Each
    Q4_0 row is computed exactly as its own call computes it (its c is added as +0.0), so those
    equal the separate call bit for bit; Q4_1 rows run in this form's float order, not in
    matmul_kquant's (which a Q4_1 matrix alone runs), within float32 rounding of it."""
    if not tensors or any(
        not isinstance(t, GGMLTensor) or t.qtype not in Q4_TYPES for t in tensors
    ):
        raise ValueError("prepare_q4_rows takes GGMLTensors of types q4_0 / q4_1")
    k = tensors[0].shape[1]
    if any(t.shape[1] != k for t in tensors):
        raise ValueError(f"prepare_q4_rows: row lengths differ: {[t.shape[1] for t in tensors]}")
    parts = [as_int4(t) for t in tensors]
    n = sum(t.shape[0] for t in tensors)
    w4 = Int4Tensor(
        np.concatenate([t.packed for t in parts]),
        np.concatenate([t.scale for t in parts]),
        None,
        (n, k),
        QK,
        "sym",
    )
    c = np.concatenate(
        [
            _prepare(t).c
            if t.qtype == "q4_1"
            else np.zeros((t.shape[0], k // QK), dtype=np.float32)
            for t in tensors
        ]
    )
    return PreparedGGML(
        "q4_1",
        (n, k),
        w4=prepare_w4(w4),
        c=np.ascontiguousarray(c),
        nbytes=sum(t.nbytes for t in tensors),
    )


# ----------------------------------------------------------------------------------------------
# CPU code reference


def matmul_ggml_ref(x, t: GGMLTensor) -> np.ndarray:
    """NumPy twin of `matmul_ggml`: int8 activations per 32-block, exact integer block dots,
    then each block's scales in float64."""
    if not isinstance(t, GGMLTensor):
        raise ValueError(f"w must be a GGMLTensor, got {type(t).__name__}")
    if t.qtype in KQUANT_FORM:
        return matmul_kquant_ref(x, t)
    n, k = t.shape
    x, vector = _as_activations(x, k)
    xq, xs = quantize_activations_ref(x, QK)  # (M, K) int8, (M, B) float32
    m, b = xs.shape
    levels = t.levels().astype(np.int64)
    if t.qtype == "q4_0":
        levels = levels - Q4_OFFSET
    xb = xq.reshape(m, b, QK).astype(np.int64)
    isum = np.einsum("mbj,nbj->mnb", xb, levels.reshape(n, b, QK))  # exact
    xs64, d64 = xs.astype(np.float64), t.d.astype(np.float64)
    y = np.einsum("mnb,mb,nb->mn", isum.astype(np.float64), xs64, d64)
    if t.qtype == "q4_1":
        y += (xs64 * xb.sum(axis=2)) @ t.m.astype(np.float64).T
    y = y.astype(np.float32)
    return y[0] if vector else y


# ----------------------------------------------------------------------------------------------
# Fast path


@numba.njit(parallel=True, cache=True)
def _add_block_constants(y, xs, xsum, c):
    """y (M, N) += (xs * xsum) @ c.T: q4_1's per-block constant term, xs (M, B) float32, xsum
    (M, B) int32, c (N, B) float32. In Numba, not BLAS: the term is 1/32 of the work, and
    handing it to OpenBLAS between two Numba-parallel calls costs both thread pools their
    spin-wait (measured: 10.6 ms instead of 1.7 ms for a 64 x 576 x 1536 matmul on 2 cores)."""
    m, nb = xs.shape
    n = c.shape[0]
    for j in numba.prange(n):
        for i in range(m):
            acc = np.float32(0.0)
            for b in range(nb):
                acc += xs[i, b] * np.float32(xsum[i, b]) * c[j, b]
            y[i, j] += acc


def matmul_ggml(x, w) -> np.ndarray:
    """x (M, K) or (K,) float @ W.T for a GGMLTensor (or PreparedGGML) W of shape (N, K)."""
    p = prepare_ggml(w)
    if isinstance(p, PreparedKQuant):  # q8_0
        return matmul_kquant(x, p)
    n, k = p.shape
    if p.qtype == "q4_0":
        return matmul_w4(x, p.w4)
    x2, vector = _as_activations(x, k)
    xq, xs, xsum = _quantize_activations(x2, QK)
    y = matmul_w4(x2, p.w4)
    _add_block_constants(y, xs, xsum, p.c)
    return y[0] if vector else y
