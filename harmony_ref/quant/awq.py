"""AWQ (Lin et al. 2023): activation-aware per-input-channel scales. A Linear's weight columns are
multiplied by s (K,) before rounding and its input divided by s, so the channels that carry the
largest activations are stored with finer steps; s = mean|x|^alpha (normalised so that
sqrt(max s x min s) = 1), alpha picked on a grid by the layer's output error on calibration
inputs. The division by s is folded into the op before the Linear where that is exact, so the
stored formats (int4-gNN, int8) and the kernels are unchanged:

    qkv  <- the block's attention RMSNorm weight     gate|up <- the FFN RMSNorm weight
    o    <- v_proj's rows (a head's output is linear in its v; under grouped-query attention one
            scale per KV channel, shared by the query heads that read it)
    down <- up_proj's rows (SwiGLU: act(gate) x up is linear in up)
    lm_head <- the final RMSNorm weight (the head then becomes its own matrix when tied)

    s, alpha, losses = awq_search([w_q, w_k, w_v], fmt, gram, mean_abs, grid=20)

The output error of a weight W' against W on inputs X is ||X (W' - W)^T||^2 = tr(D G D^T) with
D = W' - W and G = X^T X, so the search reads only the Gram matrix and the per-channel mean |x|
of the calibration inputs (the matrices a GPTQ pass collects too). alpha = 0 is s = 1, round to
nearest itself: the chosen scales never do worse than RTN on the calibration inputs. For very
tall matrices (the output head, 49,152 rows) the error is measured on every `ROW_STRIDE`-th row.
The weight clipping search of the paper's code is not done.
"""

from __future__ import annotations

import numpy as np

from harmony_ref.quant.int4 import dequantize_int4, quantize_int4
from harmony_ref.quant.int8 import quantize_int8
from harmony_ref.quant.policy import WeightFormat

MIN_SCALE = 1e-4
TALL_ROWS = 8192  # above this many rows, the search measures every ROW_STRIDE-th row
ROW_STRIDE = 8


def fake_quantize(w: np.ndarray, fmt: WeightFormat) -> np.ndarray:
    """Round-to-nearest w (N, K) in `fmt` (int8 or an int4 group format) and back to float32
    (the stored values)."""
    if not fmt.facts.grouped:  # int8: a scale per row
        t = quantize_int8(w)
        return t.values.astype(np.float32) * t.scale[:, None]
    return dequantize_int4(quantize_int4(w, group_size=fmt.group_size, scheme=fmt.scheme))


def scales_for(mean_abs: np.ndarray, alpha: float) -> np.ndarray:
    """s = mean|x|^alpha, floored at MIN_SCALE, normalised to sqrt(max s x min s) = 1."""
    s = np.maximum(np.asarray(mean_abs, np.float64), MIN_SCALE) ** alpha
    s = np.maximum(s, MIN_SCALE)
    return (s / np.sqrt(s.max() * s.min())).astype(np.float32)


def output_loss(w: np.ndarray, deq: np.ndarray, gram: np.ndarray) -> float:
    """tr(D G D^T), D = deq - w: the output error on the inputs whose X^T X is `gram`."""
    d = np.asarray(deq, np.float32) - np.asarray(w, np.float32)
    return float(np.einsum("ij,ij->", d @ gram.astype(np.float32), d, dtype=np.float64))


def awq_search(
    parts: list[np.ndarray],
    fmts: list[WeightFormat],
    gram: np.ndarray,
    mean_abs: np.ndarray,
    grid: int = 20,
    tie=None,
):
    """(s (K,), alpha, losses per alpha) minimising the summed output error of `parts` (each
    (N_i, K) sharing one input) stored as round(W s) / s in its format. `tie` (optional): a
    function mapping mean|x| (K,) to the per-channel statistic the scales must follow and back
    (the v_proj -> o_proj fold's per-KV-channel sharing)."""
    if grid < 1:
        raise ValueError(f"grid = {grid!r}: must be a positive integer")
    stat = tie(mean_abs) if tie is not None else np.asarray(mean_abs, np.float64)
    losses, best = [], (np.inf, None, 0.0)
    rows = [p[::ROW_STRIDE] if p.shape[0] > TALL_ROWS else p for p in parts]
    for a in np.arange(grid) / grid:
        s = scales_for(stat, float(a))
        loss = sum(output_loss(w, fake_quantize(w * s, f) / s, gram) for w, f in zip(rows, fmts))
        losses.append(loss)
        if loss < best[0]:
            best = (loss, s, float(a))
    return best[1], best[2], losses
