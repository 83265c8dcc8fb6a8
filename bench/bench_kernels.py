"""asv benchmarks for the Numba kernels (harmony_ref/kernels), grouped by subject.

Each track_ is a kernel's CPU time relative to its NumPy twin timed in the same seconds
(common.relative_time: the median of 15 interleaved rounds), on one thread: a ratio this
shared, drifting 2-core machine keeps from run to run, where a time does not (common.py says
why). Below 1 the kernel beats NumPy; a step up is the kernel getting slower. Inputs are seeded
and built once per process; the peakmem_ benchmarks follow the memory a call needs. Absolute
times, GB/s and thread scaling are in tests/perf (pytest-benchmark, `tox -e perf`).
`MatmulPaths` follows every matmul path this CPU runs (x86 int8 dot products and the portable
loops) against NumPy FP32, and `MatmulPeer` llama.cpp's matmul of the same shape against NumPy
FP32 (skipped unless the optional `peer` extra or HARMONY_REF_GGML_LIB provides ggml's libraries).
"""

import functools

import numpy as np

from harmony_ref.kernels import (
    KVCache,
    bias_add,
    decode_attention,
    decode_attention_ref,
    gelu,
    layer_norm,
    matmul,
    matmul_w4,
    matmul_w8,
    norm_bias_gelu,
    prepare_w4,
    prepare_w8,
)
from harmony_ref.quant.int4 import quantize_int4
from harmony_ref.quant.int8 import quantize_int8
from harmony_ref.units import MB

from .common import (
    activations,
    int4_weights,
    int8_weights,
    pin_threads,
    relative_time,
    skip_for,
    tracks,
    weights,
)

K = N = 4096
VS_NUMPY = "x NumPy time"


class MatmulW4:
    """(m, 4096) activations through a 4096 x 4096 INT4 matrix, against NumPy FP32 x @ W.T
    (prefill, m = 128: compute-bound, so NumPy's FP32 GEMM of the same shape is the yardstick)
    and against NumPy FP32 over the kernel's own weight bytes (every m; for the memory-bound
    m = 1 GEMV the only yardstick: see same_bytes_fp32). The FP32-twin ratio is skipped at
    m = 1, where it followed the memory bandwidth a fresh process gets for the 64 MB twin
    (64-72% apart between processes, an asv threshold of 100-110%), not the kernel."""

    params = ([1, 128], [32, 128])
    param_names = ["m", "group_size"]
    timeout = 300

    def setup(self, m, group_size):
        pin_threads()
        self.w = int4_weights(N, K, group_size)
        self.p = prepare_w4(self.w)
        self.x, self.w_fp32 = activations(K, m), weights(N, K)

    @skip_for((1, 32), (1, 128))
    @tracks(None, unit=VS_NUMPY, direction="lower")
    def track_time_vs_numpy_fp32(self, m, group_size):
        return relative_time(lambda: matmul_w4(self.x, self.p), lambda: self.x @ self.w_fp32.T)

    @tracks(None, unit="x NumPy same-bytes time", direction="lower")
    def track_time_vs_numpy_same_bytes(self, m, group_size):
        ref = same_bytes_fp32(self.p, K)
        return relative_time(lambda: matmul_w4(self.x, self.p), lambda: self.x @ ref.T)

    def peakmem_matmul_w4(self, m, group_size):
        # no dequantized (N, K) float matrix: peak stays near the packed weights + output
        matmul_w4(self.x, self.w)


class MatmulW8:
    """(m, 4096) through a 4096 x 4096 INT8 matrix: as MatmulW4 (the FP32-twin ratio skipped at
    m = 1, 43% apart between processes; the same-bytes ratio tracks the GEMV)."""

    params = ([1, 128],)
    param_names = ["m"]
    timeout = 300

    def setup(self, m):
        pin_threads()
        self.w = int8_weights(N, K)
        self.p = prepare_w8(self.w)
        self.x, self.w_fp32 = activations(K, m), weights(N, K)

    @skip_for((1,))
    @tracks(None, unit=VS_NUMPY, direction="lower")
    def track_time_vs_numpy_fp32(self, m):
        return relative_time(lambda: matmul_w8(self.x, self.p), lambda: self.x @ self.w_fp32.T)

    @tracks(None, unit="x NumPy same-bytes time", direction="lower")
    def track_time_vs_numpy_same_bytes(self, m):
        ref = same_bytes_fp32(self.p, K)
        return relative_time(lambda: matmul_w8(self.x, self.p), lambda: self.x @ ref.T)

    def peakmem_matmul_w8(self, m):
        matmul_w8(self.x, self.w)


def same_bytes_fp32(prepared, k: int) -> np.ndarray:
    """A (rows, k) FP32 matrix (rows of weights(4096, k)) holding as many bytes as the prepared
    kernel weights: the reference for a memory-bound GEMV. Against NumPy FP32 of the same shape,
    the m=1 kernel reads 8-16 MB while NumPy streams 64 MB, so the ratio follows whatever memory
    bandwidth the process gets (50% apart between fresh processes, bench/asv_spread.json); a
    reference reading the kernel's bytes shares that state."""
    nbytes = sum(getattr(v, "nbytes", 0) for v in vars(prepared).values())
    return weights(N, k)[: max(1, round(nbytes / (4 * k)))]


class NormBiasGelu:
    """LayerNorm + bias + GELU over (rows, 4096): fused, against the same chain as three kernels
    (what fusion saves) and against NumPy array expressions. The three-kernel chain allocates
    a (rows, 4096) output per kernel: steady_memory (pin_threads) keeps those from being
    mapped afresh per call, which made the 128-row ratio two-valued between processes."""

    params = ([1, 128],)
    param_names = ["rows"]

    def setup(self, rows):
        pin_threads()
        rng = np.random.default_rng(2)
        self.x = rng.standard_normal((rows, K), dtype=np.float32)
        self.gamma, self.beta, self.bias = (
            rng.standard_normal(K, dtype=np.float32) for _ in range(3)
        )

    def _fused(self):
        return norm_bias_gelu(self.x, self.gamma, self.beta, self.bias)

    @tracks(None, unit="x three-kernel time", direction="lower")
    def track_fused_time_vs_separate(self, rows):
        return relative_time(
            self._fused,
            lambda: gelu(bias_add(layer_norm(self.x, self.gamma, self.beta), self.bias)),
        )

    @tracks(None, unit=VS_NUMPY, direction="lower")
    def track_fused_time_vs_numpy(self, rows):
        return relative_time(
            self._fused, lambda: _numpy_chain(self.x, self.gamma, self.beta, self.bias)
        )


def _numpy_chain(x, gamma, beta, bias, eps=np.float32(1e-5)):
    h = (x - x.mean(axis=-1, keepdims=True)) / np.sqrt(
        x.var(axis=-1, keepdims=True) + eps
    ) * gamma + beta
    h = h + bias
    return (
        np.float32(0.5)
        * h
        * (1 + np.tanh(np.float32(0.7978845608) * (h + np.float32(0.044715) * h**3)))
    )


class DecodeAttention:
    """One decode step of attention (32 query heads over 8 KV heads of 128) over `context`
    cached tokens, against decode_attention_ref (NumPy: dequantize, repeat, einsum). The
    reference's temporaries are 8-64 MB; steady_memory (pin_threads) keeps it from
    page-faulting them afresh per call, which had made a third to a half of its CPU time
    fault handling, as much as the process's luck allowed."""

    params = (["fp16", "int8"], [512, 4096])
    param_names = ["kv_dtype", "context"]

    def setup(self, kv_dtype, context):
        pin_threads()
        self.cache, self.q = _attention_inputs(kv_dtype, context)

    @tracks(None, unit=VS_NUMPY, direction="lower")
    def track_time_vs_numpy(self, kv_dtype, context):
        return relative_time(
            lambda: decode_attention(self.q, self.cache),
            lambda: decode_attention_ref(self.q, self.cache),
        )

    @tracks("kv_cache_mb", unit="MB")
    def track_kv_cache_mb(self, kv_dtype, context):
        # what the cache holds for `context` tokens (and a decode step reads), not the
        # preallocated 4096-token buffer, which is the same for every context
        return self.cache.bytes_read() / MB


@functools.cache
def _attention_inputs(kv_dtype, context):
    """A 4096-token cache (8 KV heads of 128) filled to `context`, and 32 query heads."""
    rng = np.random.default_rng(3)
    cache = KVCache(4096, 8, 128, kv_dtype)
    shape = (context, 8, 128)
    cache.append(
        rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(shape, dtype=np.float32)
    )
    return cache, rng.standard_normal((32, 128), dtype=np.float32)


class MatmulPaths:
    """One (m, 4096) x 4096 x 4096 matmul on each path this CPU runs, forced, against NumPy FP32."""

    params = (
        [1, 128],
        [matmul.ISA_NAMES[i] for i in reversed(matmul.SUPPORTED_ISAS)],
        ["w4-g32", "w8"],
    )
    param_names = ["m", "path", "format"]
    timeout = 300

    def setup(self, m, path, fmt):
        pin_threads()
        w = weights(N, K)
        self.x, self.w_fp32 = activations(K, m), w
        self.isa = {matmul.ISA_NAMES[i]: i for i in matmul.SUPPORTED_ISAS}[path]
        if fmt == "w4-g32":
            self.fn = matmul._matmul_w4
            self.p = matmul._prepare_w4(quantize_int4(w, 32, "asym"), self.isa)
        else:
            self.fn, self.p = matmul._matmul_w8, matmul._prepare_w8(quantize_int8(w), self.isa)

    @tracks(None, unit=VS_NUMPY, direction="lower")
    def track_time_vs_numpy_fp32(self, m, path, fmt):
        return relative_time(
            lambda: self.fn(self.x, self.p, self.isa), lambda: self.x @ self.w_fp32.T
        )


class MatmulPeer:
    """llama.cpp's ggml_mul_mat of the same shape, per format and weight buffer, against NumPy
    FP32; each configuration is checked against the float64 product before it is timed."""

    params = ([1, 128], ["q4_0 CPU", "q4_0 CPU_REPACK", "q4_0 AMX", "q4_1 CPU", "q8_0 CPU"])
    param_names = ["m", "peer"]
    timeout = 300

    def setup(self, m, peer):
        from harmony_ref.lab import ggml_peer

        pin_threads()
        ggml = ggml_peer.GgmlPeer.load()
        if ggml is None:
            raise NotImplementedError("no ggml libraries (install the `peer` extra)")
        fmt, buft = peer.split()
        verdict = ggml_peer.probe(ggml, fmt, buft, m, N, K)
        if not verdict.ok:
            raise NotImplementedError(f"llama.cpp {peer}: {verdict.detail}")
        self.x, self.w_fp32 = activations(K, m), weights(N, K)
        self.mm = ggml.matmul(self.w_fp32, self.x, fmt, buft)

    @tracks(None, unit=VS_NUMPY, direction="lower")
    def track_time_vs_numpy_fp32(self, m, peer):
        return relative_time(self.mm.run, lambda: self.x @ self.w_fp32.T)
