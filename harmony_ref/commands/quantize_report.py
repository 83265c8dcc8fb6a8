"""`harmony-ref quantize-report`: bits per weight and round-trip error of every weight format on
a seeded random matrix shaped and scaled like an LLM projection."""

from __future__ import annotations

NAME = "quantize-report"
HELP = "table of the weight formats: true bits/weight, scale overhead and round-trip error"


def add_arguments(p) -> None:
    from harmony_ref.commands._output import add_json_flag

    p.add_argument("--rows", type=int, default=1024, help="N of the test matrix (default 1024)")
    p.add_argument("--cols", type=int, default=4096, help="K of the test matrix (default 4096)")
    p.add_argument("--seed", type=int, default=0)
    add_json_flag(p)


def quantize_report(rows: int = 1024, cols: int = 4096, seed: int = 0):
    """One row per format: storage computed from the real arrays, error from the round trip."""
    import time

    import numpy as np
    import pandas as pd

    from harmony_ref.quant.int4 import dequantize_int4, quantize_int4
    from harmony_ref.quant.int8 import dequantize_int8, quantize_int8

    rng = np.random.default_rng(seed)
    # LLM projection weights are roughly Gaussian with std ~0.02 plus a few outliers.
    w = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
    outliers = rng.random(w.shape) < 1e-3
    w[outliers] *= 8.0
    signal = float(np.mean(w.astype(np.float64) ** 2))

    def row(fmt, t, w_hat, nominal_bits, elapsed_s):
        err = (w_hat - w).astype(np.float64)
        return {
            "format": fmt,
            "bits_per_weight": t.bits_per_weight if t is not None else nominal_bits,
            "overhead_pct": 100.0 * ((t.bits_per_weight if t is not None else nominal_bits) / nominal_bits - 1),
            "weights_mb": (t.nbytes if t is not None else w_hat.nbytes) / 1e6,
            "rmse": float(np.sqrt(np.mean(err**2))),
            "max_abs_err": float(np.abs(err).max()),
            "sqnr_db": 10 * np.log10(signal / max(np.mean(err**2), 1e-300)),
            "quantize_ms": elapsed_s * 1e3,
        }

    rows_out = []
    w16 = w.astype(np.float16).astype(np.float32)
    rows_out.append(row("fp16", None, w16, 16, 0.0))
    rows_out[-1]["weights_mb"] = w.size * 2 / 1e6
    quantize_int8(w[:2])  # compile outside the timing
    t0 = time.perf_counter()
    t8 = quantize_int8(w)
    rows_out.append(row("int8", t8, dequantize_int8(t8), 8, time.perf_counter() - t0))
    quantize_int4(w[:2, :128])
    for scheme in ("asym", "sym"):
        for group in (32, 64, 128):
            t0 = time.perf_counter()
            t4 = quantize_int4(w, group, scheme)
            elapsed = time.perf_counter() - t0
            rows_out.append(row(t4.format_name, t4, dequantize_int4(t4), 4, elapsed))
    return pd.DataFrame(rows_out)


def run(args) -> int:
    from harmony_ref.commands._output import print_json, print_table

    df = quantize_report(args.rows, args.cols, args.seed)
    if args.json:
        print_json({"rows": args.rows, "cols": args.cols, "seed": args.seed,
                    "formats": df.to_dict(orient="records")})
    else:
        print_table(df, title=f"weight formats on a seeded {args.rows}x{args.cols} matrix "
                              "(N(0, 0.02) with 0.1% 8x outliers)")
        print("overhead_pct: storage beyond the nominal 4 or 8 bits (scales, zero points), "
              "computed from the real arrays.")
    return 0
