"""Seeded, cached inputs shared by the asv benchmarks (numpy's benchmarks/common.py pattern).

Must not be changed -- only appended: asv compares a benchmark across commits, and changing an
input silently breaks that history. New inputs get new names.
"""

from __future__ import annotations

import functools

import numpy as np

SEED = 20240601

# The sweep every predicted-metric benchmark runs over (shipped profiles and policies).
PROFILES = ["harmony-flagship", "harmony-midrange", "harmony-lowend"]
POLICIES = ["fp16", "int8", "int4-g32", "int4-g128", "mixed"]
MODEL = "llama-3.2-3b"

# Decode GEMV shapes: (N outputs, K inputs) of real projections.
GEMV_SHAPES = [(3072, 3072), (8192, 3072), (4096, 14336)]


@functools.lru_cache(maxsize=None)
def weights(n: int, k: int, seed: int = SEED) -> np.ndarray:
    """(N, K) float32 weights shaped like an LLM projection (std 0.02). Cached: treat as read-only."""
    w = (np.random.default_rng(seed).standard_normal((n, k)) * 0.02).astype(np.float32)
    w.setflags(write=False)
    return w


@functools.lru_cache(maxsize=None)
def activations(k: int, rows: int = 1, seed: int = SEED + 1) -> np.ndarray:
    """(rows, K) float32 activations (unit variance). Cached: treat as read-only."""
    x = np.random.default_rng(seed).standard_normal((rows, k)).astype(np.float32)
    x.setflags(write=False)
    return x


def shape_id(n: int, k: int) -> str:
    return f"n{n:05}_k{k:05}"
