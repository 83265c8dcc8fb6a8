"""Host microbenchmarks for calibration: GEMV and GEMM at several sizes and weight formats (through
kernels/formats.py), the norm + bias + GELU chain fused and unfused, the empty-kernel launch
(timed by backends/host_timing.py, which also measures the streaming-read bandwidth), and a load
canary that says when the machine is busy.

Each benchmark is one `OpSample` whose ops and bytes are counted the way the op graph counts them
(harmony_ref/model/graph.py: fp16 activations, weights at their real stored size), so the fitted
numbers mean the same thing in the cost model. Sizes alternate between the fitted set and the
held-out set (`holdout=True` on every third size of each family), so held-out sizes lie inside the
fitted range and test interpolation, not extrapolation.
"""

from __future__ import annotations

import numpy as np

from harmony_ref.backends.host_timing import launch_timing, onchip_buffer_bytes, pick, time_call
from harmony_ref.calibrate.fit import OpSample
from harmony_ref.device.cost import dram_bytes
from harmony_ref.kernels.formats import format_of
from harmony_ref.kernels.matmul import matmul_w4
from harmony_ref.kernels.norm import bias_add, gelu, layer_norm, norm_bias_gelu
from harmony_ref.model.graph import ACT_BYTES, GELU_FLOPS_PER_ELEMENT, NORM_FLOPS_PER_ELEMENT
from harmony_ref.quant.int4 import quantize_int4
from harmony_ref.quant.policy import WeightFormat

# per element, as model/graph.py counts them (a bias add is one add)
NORM_FLOPS, BIAS_FLOPS, GELU_FLOPS = NORM_FLOPS_PER_ELEMENT, 1, GELU_FLOPS_PER_ELEMENT
BENCH_FORMATS = {
    "int4": WeightFormat("int4", 32, "asym"),
    "int4-g128": WeightFormat("int4", 128, "asym"),
    "int8": WeightFormat("int8"),
    "fp16": WeightFormat("fp16"),
}
# (N, K) weight shapes: square and the rectangular shapes of attention and FFN projections
SHAPES = [
    (512, 512),
    (1024, 1024),
    (2048, 512),
    (1536, 1536),
    (512, 2048),
    (2048, 2048),
    (4096, 1024),
    (3072, 3072),
    (1024, 4096),
    (4096, 4096),
]
ROWS = (1, 8, 64)  # GEMV (decode) and small / medium GEMM (prefill)
NORM_SHAPES = [
    (1, 512),
    (1, 1024),
    (16, 1024),
    (64, 2048),
    (128, 384),
    (256, 1024),
    (512, 768),
    (512, 2048),
    (32, 4096),
]
QUICK_SHAPES = SHAPES[:6]
QUICK_NORM = NORM_SHAPES[:6]


def matmul_samples(
    formats=("int4", "int4-g128", "int8", "fp16"),
    shapes=SHAPES,
    rows=ROWS,
    warmup: int = 1,
    repeats: int = 5,
    seed: int = 0,
    onchip: int | None = None,
    progress=None,
    stat: str = "min",
) -> list[OpSample]:
    rng = np.random.default_rng(seed)
    onchip = onchip or onchip_buffer_bytes()
    out = []
    for fname in formats:
        fmt = BENCH_FORMATS[fname]
        f = format_of(fmt)
        cls = fmt.kind
        for i, (n, k) in enumerate(shapes):
            w = rng.standard_normal((n, k), dtype=np.float32) * np.float32(0.02)
            w = f.prepare(f.quantize(w, fmt.group_size))  # the kernel's operand, built once
            for m in rows:
                x = rng.standard_normal((m, k), dtype=np.float32)
                call = lambda x=x, w=w, fn=f.matmul: fn(x, w)  # noqa: E731
                t = time_call(call, warmup, repeats, min_sample_s=2e-3)
                tile = m * k * ACT_BYTES  # the activation block the weights stream past
                nbytes = float(
                    dram_bytes(fmt.nbytes(n, k), (m * k + m * n) * ACT_BYTES, tile, onchip)
                )
                out.append(
                    OpSample(
                        f"matmul_{fname}_m{m}_n{n}_k{k}",
                        cls,
                        2.0 * m * n * k,
                        nbytes,
                        1,
                        pick(t, stat),
                        t.samples_s,
                        holdout=i % 3 == 2,
                    )
                )
                if progress:
                    progress()
    return out


def norm_samples(
    shapes=NORM_SHAPES,
    warmup: int = 1,
    repeats: int = 5,
    seed: int = 0,
    progress=None,
    stat: str = "min",
) -> list[OpSample]:
    """The LayerNorm + bias + GELU chain: one fused kernel, and the three unfused kernels."""
    rng = np.random.default_rng(seed)
    out = []
    for i, (r, h) in enumerate(shapes):
        x = rng.standard_normal((r, h), dtype=np.float32)
        g, b, bias = (rng.standard_normal(h, dtype=np.float32) for _ in range(3))
        e = r * h
        hold = i % 3 == 2
        cases = [
            (
                "norm_bias_gelu",
                lambda: norm_bias_gelu(x, g, b, bias),
                (NORM_FLOPS + BIAS_FLOPS + GELU_FLOPS) * e,
                (2 * e + 3 * h) * ACT_BYTES,
            ),
            (
                "layer_norm",
                lambda: layer_norm(x, g, b),
                NORM_FLOPS * e,
                (2 * e + 2 * h) * ACT_BYTES,
            ),
            ("bias_add", lambda: bias_add(x, bias), BIAS_FLOPS * e, (2 * e + h) * ACT_BYTES),
            ("gelu", lambda: gelu(x), GELU_FLOPS * e, 2 * e * ACT_BYTES),
        ]
        for name, fn, ops, nbytes in cases:
            t = time_call(fn, warmup, repeats, min_sample_s=2e-3)
            out.append(
                OpSample(
                    f"{name}_{r}x{h}",
                    "vector",
                    float(ops),
                    float(nbytes),
                    1,
                    pick(t, stat),
                    t.samples_s,
                    holdout=hold,
                )
            )
            if progress:
                progress()
    return out


def launch_sample(warmup: int = 3, repeats: int = 7) -> OpSample:
    """The empty-kernel launch (backends/host_timing.py) as an OpSample."""
    t = launch_timing(warmup, repeats)
    return OpSample("empty_kernel", "vector", 0.0, 0.0, 1, t.median_s, t.samples_s)


def measure_host_ops(
    quick: bool = False, repeats: int = 5, progress=None, stat: str = "min"
) -> tuple[list[OpSample], OpSample]:
    """All calibration microbenchmarks (quick: fewer sizes, for tests). Returns (samples to fit
    and score, the empty-kernel launch). The empty kernel is kept out of the fit: it measures the
    bare Numba dispatch (~0.1 us), while every real kernel call also pays its Python wrapper
    (argument checks, output allocation): the launch overhead the model needs is the latter."""
    shapes, norms = (QUICK_SHAPES, QUICK_NORM) if quick else (SHAPES, NORM_SHAPES)
    rows = (1, 8) if quick else ROWS
    ops = matmul_samples(shapes=shapes, rows=rows, repeats=repeats, progress=progress, stat=stat)
    ops += norm_samples(shapes=norms, repeats=repeats, progress=progress, stat=stat)
    return ops, launch_sample()


def count_host_ops(quick: bool = False) -> int:
    shapes, norms = (QUICK_SHAPES, QUICK_NORM) if quick else (SHAPES, NORM_SHAPES)
    rows = (1, 8) if quick else ROWS
    return len(BENCH_FORMATS) * len(shapes) * len(rows) + 4 * len(norms)


class LoadCanary:
    """A fixed INT4 GEMV (2048 x 2048) timed now and then: its slowdown against the first
    measurement says how much other processes are taking from this one. Used to wait (bounded)
    for a quiet moment before a measurement and to label measurements taken under load."""

    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.w = quantize_int4(rng.standard_normal((2048, 2048), dtype=np.float32), 32, "asym")
        self.x = rng.standard_normal((1, 2048), dtype=np.float32)
        self.fn = matmul_w4
        self.fn(self.x, self.w)
        self.base_s = self.time_s()

    def time_s(self) -> float:
        return min(time_call(lambda: self.fn(self.x, self.w), 1, 7).samples_s)

    def ratio(self) -> float:
        """Slowdown against the fastest canary seen so far (the baseline itself may have been
        taken under load: it only ever moves down)."""
        t = self.time_s()
        self.base_s = min(self.base_s, t)
        return t / self.base_s

    def wait_quiet(
        self, max_ratio: float = 1.2, timeout_s: float = 20.0, poll_s: float = 1.0
    ) -> float:
        """Poll until the canary is within `max_ratio` of its baseline or `timeout_s` passes;
        returns the last ratio seen."""
        import time

        t0 = time.monotonic()
        r = self.ratio()
        while r > max_ratio and time.monotonic() - t0 < timeout_s:
            time.sleep(poll_s)
            r = self.ratio()
        return r
