"""asv benchmarks for the Numba kernels (harmony_ref/kernels), grouped by subject.

Inputs are seeded and built in `setup`, which also calls each kernel once so Numba's compile
(or cache load) stays out of the timings. Each time_ method is one call. The ratios against NumPy
and the GB/s figures live in tests/perf (pytest-benchmark); asv tracks the kernels over commits.
`MatmulPaths` times every matmul path this CPU runs (x86 int8 dot products and the portable
loops) beside NumPy FP32, and `MatmulPeer` llama.cpp's matmul of the same shapes (skipped unless
the optional `peer` extra or HARMONY_REF_GGML_LIB provides ggml's libraries).
"""

import numpy as np

from harmony_ref.kernels import matmul
from harmony_ref.kernels import (
    KVCache,
    bias_add,
    decode_attention,
    gelu,
    layer_norm,
    matmul_w4,
    matmul_w8,
    norm_bias_gelu,
    prepare_w4,
    prepare_w8,
)
from harmony_ref.quant.int4 import quantize_int4
from harmony_ref.quant.int8 import quantize_int8
from harmony_ref.units import MB

K = 4096


def _weights(n, seed=0):
    return np.random.default_rng(seed).standard_normal((n, K), dtype=np.float32) * np.float32(0.02)


def _activations(m, seed=1):
    return np.random.default_rng(seed).standard_normal((m, K), dtype=np.float32)


class MatmulW4:
    params = ([1, 128], [4096, 11008], [32, 128])
    param_names = ["m", "n", "group_size"]

    def setup(self, m, n, group_size):
        self.w = quantize_int4(_weights(n), group_size, "asym")
        self.p = prepare_w4(self.w)
        self.x = _activations(m)
        matmul_w4(self.x, self.p)

    def time_matmul_w4(self, m, n, group_size):
        matmul_w4(self.x, self.p)

    def time_prepare_w4(self, m, n, group_size):
        _fresh_prepare_w4(self.w)

    def peakmem_matmul_w4(self, m, n, group_size):
        # no dequantized (N, K) float matrix: peak stays near the packed weights + output
        matmul_w4(self.x, self.w)


def _fresh_prepare_w4(t):
    """The preparation itself, bypassing the per-tensor cache."""
    matmul._prepared.pop(t, None)
    return prepare_w4(t)


class MatmulW8:
    params = ([1, 128], [4096, 11008])
    param_names = ["m", "n"]

    def setup(self, m, n):
        self.w = quantize_int8(_weights(n))
        self.p = prepare_w8(self.w)
        self.x = _activations(m)
        matmul_w8(self.x, self.p)

    def time_matmul_w8(self, m, n):
        matmul_w8(self.x, self.p)

    def peakmem_matmul_w8(self, m, n):
        matmul_w8(self.x, self.w)


class MatmulPaths:
    params = ([1, 128], ["numpy-fp32"] + [matmul.ISA_NAMES[i] for i in reversed(matmul.SUPPORTED_ISAS)],
              ["w4-g32", "w8"])
    param_names = ["m", "path", "format"]

    def setup(self, m, path, fmt):
        w = _weights(4096)
        self.x = _activations(m)
        if path == "numpy-fp32":
            self.w = w
            self.x @ self.w.T
            return
        self.isa = {matmul.ISA_NAMES[i]: i for i in matmul.SUPPORTED_ISAS}[path]
        if fmt == "w4-g32":
            self.fn, self.p = matmul._matmul_w4, matmul._prepare_w4(quantize_int4(w, 32, "asym"), self.isa)
        else:
            self.fn, self.p = matmul._matmul_w8, matmul._prepare_w8(quantize_int8(w), self.isa)
        self.fn(self.x, self.p, self.isa)

    def time_matmul(self, m, path, fmt):
        if path == "numpy-fp32":
            self.x @ self.w.T
        else:
            self.fn(self.x, self.p, self.isa)


class MatmulPeer:
    params = ([1, 128], ["q4_0 CPU", "q4_0 CPU_REPACK", "q4_0 AMX", "q4_1 CPU", "q8_0 CPU"])
    param_names = ["m", "peer"]

    def setup(self, m, peer):
        from harmony_ref.kernels import matmul_peer

        ggml = matmul_peer.GgmlPeer.load()
        if ggml is None:
            raise NotImplementedError("no ggml libraries (install the `peer` extra)")
        fmt, buft = peer.split()
        verdict = matmul_peer.probe(ggml, fmt, buft, m, 4096, K)
        if not verdict.ok:
            raise NotImplementedError(f"llama.cpp {peer}: {verdict.detail}")
        self.mm = ggml.matmul(_weights(4096), _activations(m), fmt, buft)
        self.mm.run()

    def time_matmul(self, m, peer):
        self.mm.run()


class NormBiasGelu:
    params = ([1, 128], [4096])
    param_names = ["rows", "width"]

    def setup(self, rows, width):
        rng = np.random.default_rng(2)
        self.x = rng.standard_normal((rows, width), dtype=np.float32)
        self.gamma, self.beta, self.bias = (rng.standard_normal(width, dtype=np.float32) for _ in range(3))
        norm_bias_gelu(self.x, self.gamma, self.beta, self.bias)
        gelu(bias_add(layer_norm(self.x, self.gamma, self.beta), self.bias))

    def time_fused(self, rows, width):
        norm_bias_gelu(self.x, self.gamma, self.beta, self.bias)

    def time_separate(self, rows, width):
        gelu(bias_add(layer_norm(self.x, self.gamma, self.beta), self.bias))


class DecodeAttention:
    params = (["fp16", "int8"], [512, 2048, 4096])
    param_names = ["kv_dtype", "context"]

    def setup(self, kv_dtype, context):
        rng = np.random.default_rng(3)
        self.cache = KVCache(4096, 8, 128, kv_dtype)
        shape = (context, 8, 128)
        self.cache.append(rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(shape, dtype=np.float32))
        self.q = rng.standard_normal((32, 128), dtype=np.float32)
        decode_attention(self.q, self.cache)

    def time_decode_attention(self, kv_dtype, context):
        decode_attention(self.q, self.cache)

    def track_kv_cache_mb(self, kv_dtype, context):
        return self.cache.nbytes / MB

    track_kv_cache_mb.unit = "MB"
