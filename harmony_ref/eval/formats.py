"""What each weight format costs and loses on a matrix shaped and scaled like an LLM projection:
true bits per weight and storage overhead (from the real arrays), round-trip RMSE, max error and
SQNR, and quantize time. `harmony-ref quantize-report` prints it.

    df = format_report(rows=1024, cols=4096, seed=0)      # one row per format, a DataFrame
"""

from __future__ import annotations

import time

import numpy as np

from harmony_ref.kernels.formats import FORMATS
from harmony_ref.units import MB, MS_PER_S

GROUP_SIZES = (32, 64, 128)  # a grouped format (int4) is reported at each
# the formats the report compares with the fp32 weights: our runtime's own (GGUF's block formats
# are left out, as they always were; `sensitivity` scores them on a real decoder)
REPORTED = ("fp16", "int8", "int4", "int4-sym")
MAX_REPORT_WEIGHTS = 2**26  # rows x cols: 16x the default, float64 copies of it in memory


def format_report(rows: int = 1024, cols: int = 4096, seed: int = 0):
    """One row per format: storage computed from the real arrays, error from the round trip,
    quantize time measured (after a warm-up call, so Numba compilation is not in it)."""
    import pandas as pd

    if rows < 1 or cols < 1 or cols % max(GROUP_SIZES):
        raise ValueError(
            f"--rows {rows} --cols {cols}: need rows >= 1 and cols a positive multiple "
            f"of {max(GROUP_SIZES)} (every group size {list(GROUP_SIZES)} must divide it)"
        )
    if rows * cols > MAX_REPORT_WEIGHTS:
        raise ValueError(
            f"--rows {rows:,} --cols {cols:,}: {rows * cols:,} weights, at most "
            f"{MAX_REPORT_WEIGHTS:,}"
        )
    rng = np.random.default_rng(seed)
    # LLM projection weights are roughly Gaussian with std ~0.02 plus a few outliers.
    w = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
    outliers = rng.random(w.shape) < 1e-3
    w[outliers] *= 8.0
    signal = float(np.mean(w.astype(np.float64) ** 2))

    def timed(quantize, *args):
        quantize(w[:2], *args)  # compile (or load from the Numba cache) outside the timing
        t0 = time.perf_counter()
        stored = quantize(w, *args)
        return stored, time.perf_counter() - t0

    def row(fmt: str, stored_bytes: int, nominal_bits: int, w_hat, elapsed_s: float) -> dict:
        bits = 8.0 * stored_bytes / w.size
        err = (w_hat - w).astype(np.float64)
        return {
            "format": fmt,
            "bits_per_weight": bits,
            "overhead_pct": 100.0 * (bits / nominal_bits - 1),
            "weights_mb": stored_bytes / MB,
            "rmse": float(np.sqrt(np.mean(err**2))),
            "max_abs_err": float(np.abs(err).max()),
            "sqnr_db": 10 * np.log10(signal / max(np.mean(err**2), 1e-300)),
            "quantize_ms": elapsed_s * MS_PER_S,
        }

    out = []
    for name in REPORTED:
        f = FORMATS[name]
        for group in GROUP_SIZES if f.facts.grouped else (None,):
            stored, s = timed(f.quantize, group)
            label = stored.format_name if f.facts.grouped else name
            out.append(row(label, stored.nbytes, f.facts.bits, f.dequantize(stored), s))
    return pd.DataFrame(out)
