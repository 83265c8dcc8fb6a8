"""Per-layer sensitivity of MiniLM to quantization: one Linear at a time in a format, the rest FP32.

    rows = layer_losses("int4-g32", model, evalset)     # one dict per Linear
    df = sensitivity("int4-g32")                         # the same, ranked, as a DataFrame

Recall moves in steps of 1/2n and mostly does not move at all for one layer, so layers are ranked
by a continuous loss, `cosine_loss` = 1 - mean cosine to FP32, and the recall drop is reported
beside it. The layers before the one under test compute exactly what FP32 does, so their output
is cached and each run starts at the layer under test. Results are cached on disk per (weights,
sentences, format, linear backend) under the cache directory ($HARMONY_REF_NO_LOSS_CACHE=1 turns
the cache off).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from harmony_ref._io import write_text_atomic
from harmony_ref.eval.embedding import (
    EvalSet,
    compare,
    fp32_embeddings,
    load_pairs,
    model_or_default,
)
from harmony_ref.quant.policy import WeightFormat, parse_format

LOSS_CACHE_VERSION = 2  # bump when the forward or the loss definition changes


def _loss_cache_path(model, evalset: EvalSet, fmt: WeightFormat) -> Path | None:
    if os.environ.get("HARMONY_REF_NO_LOSS_CACHE"):
        return None
    from harmony_ref.checkpoint.assets import cache_dir

    key = hashlib.sha256(
        f"{LOSS_CACHE_VERSION}|{model.weights_fingerprint()}|"
        f"{evalset.fingerprint}|{fmt.name}|{model.resolved_backend()}".encode()
    ).hexdigest()[:32]
    return cache_dir() / "layer-losses" / f"{fmt.name}-{key}.json"


def layer_losses(
    fmt: str | WeightFormat = "int4-g32",
    model=None,
    evalset: EvalSet | None = None,
    progress: bool = False,
) -> list[dict]:
    """One row per Linear: that layer alone in `fmt`, all others FP32, measured on the eval set.
    Keys: layer, format, cosine_loss, cosine_min, accuracy_drop_pct, top1_agreement_pct,
    bytes_fp32, bytes."""
    model = model_or_default(model)
    evalset = evalset or load_pairs()
    fmt = parse_format(fmt) if isinstance(fmt, str) else fmt
    path = _loss_cache_path(model, evalset, fmt)
    if path is not None and path.is_file():
        try:
            rows = json.loads(path.read_text())["rows"]
            if [r["layer"] for r in rows] == model.linear_names():
                return rows
        except (ValueError, KeyError, TypeError):
            pass  # a damaged cache file is measured again and overwritten

    ref = fp32_embeddings(model, evalset)
    fp32 = model.linears("fp32")
    batches = model.batches(evalset.sentences)
    # FP32 input of every encoder layer, per batch: runs for layer i start from inputs[b][i].
    inputs = []
    for b in batches:
        h, per = model.embed(b), []
        for i in range(model.n_layers):
            per.append(h)
            h = model.layer(h, b.mask, i, fp32)
        inputs.append(per)

    names = model.linear_names()
    # Quantize everything first: Numba's parallel quantizers leave threads spinning for a while,
    # which slows the BLAS calls right after them.
    quantized = {name: model.make_linear(name, fmt) for name in names}
    rows = []
    task = None
    if progress:
        from rich.console import Console
        from rich.progress import Progress

        bar = Progress(console=Console(stderr=True), transient=True)  # stdout stays the result
        bar.start()
        task = bar.add_task(f"sensitivity: each Linear alone in {fmt.name}", total=len(names))
    try:
        for name in names:
            i = int(name.split(".")[2])
            lin = dict(fp32)
            lin[name] = quantized[name]
            emb = np.empty_like(ref)
            for b, per in zip(batches, inputs):
                emb[b.index] = model.pool(model.run_layers(per[i], b.mask, lin, start=i), b.mask)
            m = compare(ref, emb, evalset.partner)
            n, k = model.params[name + ".weight"].shape
            rows.append(
                {
                    "layer": name,
                    "format": fmt.name,
                    "cosine_loss": 1.0 - m.value("cosine_mean"),
                    "cosine_min": m.value("cosine_min"),
                    "accuracy_drop_pct": m.value("accuracy_drop_pct"),
                    "top1_agreement_pct": m.value("top1_agreement_pct"),
                    "bytes_fp32": 4 * n * k,
                    "bytes": lin[name].nbytes,
                }
            )
            if task is not None:
                bar.advance(task)
    finally:
        if task is not None:
            bar.stop()
    if path is not None:
        write_text_atomic(path, json.dumps({"format": fmt.name, "rows": rows}))
    return rows


def sensitivity(
    fmt: str = "int4-g32", model=None, evalset: EvalSet | None = None, progress: bool = False
):
    """Layers ranked by cosine loss (most sensitive first), as a pandas DataFrame."""
    import pandas as pd

    df = pd.DataFrame(layer_losses(fmt, model, evalset, progress))
    df = df.sort_values(["cosine_loss", "accuracy_drop_pct"], ascending=False, kind="stable")
    df.insert(0, "rank", range(1, len(df) + 1))
    df["drop_rank"] = df["accuracy_drop_pct"].rank(ascending=False, method="min").astype(int)
    return df.reset_index(drop=True)
