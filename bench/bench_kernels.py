"""asv benchmarks for the Numba kernels (harmony_ref/kernels), grouped by subject.

Inputs are seeded, built once per process (common.py caches them: asv re-runs setup before each
sample) and the kernel is called once in setup, so Numba's compile (or cache load) and a cold
first call stay out of the timings. Each time_ method is one call, on one thread (common.THREADS:
a 2-thread kernel on a shared 2-core machine waits a scheduler slice whenever a worker is
preempted), timed in CPU time (common.Timed); tests/perf measures the thread scaling. The ratios against NumPy
and the GB/s figures live in tests/perf (pytest-benchmark); asv tracks the kernels over commits.
"""

import functools

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
from harmony_ref.units import MB

from .common import Timed, activations, int4_weights, int8_weights, pin_threads, tracks

K = 4096


class MatmulW4(Timed):
    params = ([1, 128], [4096, 11008], [32, 128])
    param_names = ["m", "n", "group_size"]

    def setup(self, m, n, group_size):
        pin_threads()
        self.w = int4_weights(n, K, group_size)
        self.p = prepare_w4(self.w)
        self.x = activations(K, m)
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


class MatmulW8(Timed):
    params = ([1, 128], [4096, 11008])
    param_names = ["m", "n"]

    def setup(self, m, n):
        pin_threads()
        self.w = int8_weights(n, K)
        self.p = prepare_w8(self.w)
        self.x = activations(K, m)
        matmul_w8(self.x, self.p)

    def time_matmul_w8(self, m, n):
        matmul_w8(self.x, self.p)

    def peakmem_matmul_w8(self, m, n):
        matmul_w8(self.x, self.w)


class NormBiasGelu(Timed):
    params = ([1, 128],)
    param_names = ["rows"]

    def setup(self, rows):
        pin_threads()
        rng = np.random.default_rng(2)
        self.x = rng.standard_normal((rows, K), dtype=np.float32)
        self.gamma, self.beta, self.bias = (rng.standard_normal(K, dtype=np.float32) for _ in range(3))
        norm_bias_gelu(self.x, self.gamma, self.beta, self.bias)
        gelu(bias_add(layer_norm(self.x, self.gamma, self.beta), self.bias))

    def time_fused(self, rows):
        norm_bias_gelu(self.x, self.gamma, self.beta, self.bias)

    def time_separate(self, rows):
        gelu(bias_add(layer_norm(self.x, self.gamma, self.beta), self.bias))


class DecodeAttention(Timed):
    params = (["fp16", "int8"], [512, 2048, 4096])
    param_names = ["kv_dtype", "context"]

    def setup(self, kv_dtype, context):
        pin_threads()
        self.cache, self.q = _attention_inputs(kv_dtype, context)
        decode_attention(self.q, self.cache)

    def time_decode_attention(self, kv_dtype, context):
        decode_attention(self.q, self.cache)

    @tracks("kv_cache_mb", unit="MB")
    def track_kv_cache_mb(self, kv_dtype, context):
        # what the cache holds for `context` tokens (and a decode step reads), not the
        # preallocated 4096-token buffer, which is the same for every context
        return self.cache.bytes_read() / MB


@functools.lru_cache(maxsize=None)
def _attention_inputs(kv_dtype, context):
    """A 4096-token cache (8 KV heads of 128) filled to `context`, and 32 query heads."""
    rng = np.random.default_rng(3)
    cache = KVCache(4096, 8, 128, kv_dtype)
    shape = (context, 8, 128)
    cache.append(rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(shape, dtype=np.float32))
    return cache, rng.standard_normal((32, 128), dtype=np.float32)
