"""Structured pruning by L1 norm or by activation-aware score: whole FFN channels and whole
attention heads are removed, so the pruned model is smaller matrices (not masked zeros) and runs
through the same forward.

    pruned = prune_decoder(weights, spec)          # DecoderWeights -> narrower DecoderWeights
    pruned = prune_decoder(weights, spec, norms)   # score "activation": norms per block from
                                                   # compress/observe.py: activation_norms
    params = prune_minilm(params, n_heads, spec)   # MiniLM's checkpoint dict, the same rules
    spec = pruned_spec(model_spec, policy.prune)    # the shapes the device model costs

What goes together (a unit is scored by the sum of the L1 norms of everything removed with it):
- FFN channel j: row j of gate_proj and up_proj (of BERT's intermediate.dense, with its bias)
  and column j of down_proj (output.dense). The output is exactly the unpruned one with those
  channels' activations zeroed.
- Query head h (head_unit "query"): its head_dim rows of q_proj (and bias) and columns of
  o_proj. The same number of query heads is kept in every KV group, so query head h still reads
  KV head h // group with the new, uniform group size: grouped-query attention stays valid.
- KV group g (head_unit "kv", and "query" when every KV head has one query head): KV head g's
  rows of k_proj and v_proj and all its query heads.
- BERT heads (no GQA): a head's rows of query, key and value (and biases) and o columns.
With `score = "activation"` (quant/compress.py) the weights alone do not decide: FFN channel j
scores ||h_j|| x ||down[:, j]||_1 (h: the SwiGLU output feeding down_proj, its L2 norm over
calibration tokens), query head h ||a_h|| x the L1 norm of its o_proj columns (a_h: the head's
attention output), a KV group the sum of its query heads; the groupings above are unchanged.
With `score = "obs"` (and repair) the FFN channels are chosen by what their removal costs after
the repair (`obs_keep`: greedy structured Optimal Brain Surgeon on down_proj's input Gram, with
that ridge on the whole diagonal), not before it; heads keep the activation score.
With `repair = true` the Linear that reads the pruned units (down_proj after FFN channels,
o_proj after heads) is refitted so that its output on calibration activations stays what the
unpruned layer gave: the kept columns W_K take a correction Δ, the ridge solution of
min ||X_K Δ^T - X_R W_R^T||^2 + λ ||Δ||^2 (the removed columns' contribution reconstructed from
the kept inputs), Δ^T = (G_KK + λ I)^-1 G_KR W_R^T with G = X^T X the Gram matrix of the layer's
input on the unpruned model and λ = repair_ridge x mean(diag G_KK) (`repair_next`). The ridge is
on the correction, not on the weights: a plain ridge refit of the whole Linear overfits the few
calibration tokens. Kept indices stay in their original order. Ratios come per layer type (ffn, heads) and per block
(quant/compress.py: PruneSpec); kept FFN channels are rounded to a multiple of FFN_MULTIPLE,
kept heads to whole heads (at least one). Nothing here is fine-tuned: that is model/distill.py
(`distill_epochs`), run on the pruned (and repaired) weights this module returns.

The config of a pruned DecoderWeights stays the original architecture; each LayerWeights
carries its own narrower matrices, and the forwards read a block's head counts and FFN width
from them (LayerWeights.dims).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from harmony_ref.model.decoder import DecoderConfig, DecoderWeights, LayerWeights
from harmony_ref.model.spec import ModelSpec
from harmony_ref.quant.compress import FFN_MULTIPLE, PruneSpec


def _kept_count(total: int, ratio: float, multiple: int) -> int:
    """How many of `total` units survive removing `ratio` of them, in steps of `multiple`."""
    if ratio == 0 or total <= multiple:
        return total
    keep = int(round(total * (1.0 - ratio) / multiple)) * multiple
    return min(total, max(multiple, keep))


def _top(scores: np.ndarray, keep: int) -> np.ndarray:
    """Indices of the `keep` largest scores, in ascending index order (stable on ties)."""
    order = np.argsort(-scores, kind="stable")[:keep]
    return np.sort(order)


def _l1_rows(w: np.ndarray) -> np.ndarray:
    return np.abs(w).sum(axis=1, dtype=np.float64)


def ffn_keep(
    gate: np.ndarray | None,
    up: np.ndarray,
    down: np.ndarray,
    ratio: float,
    up_bias: np.ndarray | None = None,
    act: np.ndarray | None = None,
) -> np.ndarray:
    """Kept FFN channels: rows of gate/up (F, D), columns of down (D, F), by summed L1 norm, or
    with `act` (F,) (each channel's activation norm) by act x L1 of its down column."""
    if act is not None:
        score = np.asarray(act, np.float64) * _l1_rows(down.T)
    else:
        score = _l1_rows(up) + _l1_rows(down.T)
        if gate is not None:
            score += _l1_rows(gate)
        if up_bias is not None:
            score += np.abs(up_bias).astype(np.float64)
    return _top(score, _kept_count(up.shape[0], ratio, FFN_MULTIPLE))


def _head_scores(w_rows: np.ndarray, o: np.ndarray, n: int, hd: int) -> np.ndarray:
    """Per head: L1 of its hd rows of the row-stacked projections and hd columns of o."""
    rows = _l1_rows(w_rows).reshape(n, hd).sum(axis=1)
    cols = _l1_rows(o.T).reshape(n, hd).sum(axis=1)
    return rows + cols


def decoder_heads_keep(
    lw: LayerWeights, head_dim: int, ratio: float, unit: str, act: np.ndarray | None = None
):
    """(kept query heads, kept KV heads) of one block, GQA-consistent (see the module doc).
    `act` (H,): each query head's attention-output norm (the activation-aware score)."""
    hd = head_dim
    nh, nkv = lw.wq.shape[0] // hd, lw.wk.shape[0] // hd
    group = nh // nkv
    if act is not None:
        q_score = np.asarray(act, np.float64) * _l1_rows(lw.wo.T).reshape(nh, hd).sum(axis=1)
    else:
        q_score = _head_scores(lw.wq, lw.wo, nh, hd)
        if lw.bq is not None:
            q_score += np.abs(lw.bq).reshape(nh, hd).sum(axis=1)
    if ratio == 0:
        return np.arange(nh), np.arange(nkv)
    if unit == "query" and group > 1:  # (one query head per KV head: whole groups go)
        per_group = _kept_count(group, ratio, 1)
        q_keep = np.concatenate(
            [g * group + _top(q_score[g * group : (g + 1) * group], per_group) for g in range(nkv)]
        )
        return q_keep, np.arange(nkv)
    kv_score = q_score.reshape(nkv, group).sum(axis=1)
    if act is None:
        kv_score += _l1_rows(lw.wk).reshape(nkv, hd).sum(axis=1)
        kv_score += _l1_rows(lw.wv).reshape(nkv, hd).sum(axis=1)
    kv_keep = _top(kv_score, _kept_count(nkv, ratio, 1))
    q_keep = (kv_keep[:, None] * group + np.arange(group)[None, :]).reshape(-1)
    return q_keep, kv_keep


def _rows(heads: np.ndarray, hd: int) -> np.ndarray:
    return (heads[:, None] * hd + np.arange(hd)[None, :]).reshape(-1)


def _take(a, idx, axis=0):
    return None if a is None else np.ascontiguousarray(np.take(a, idx, axis=axis))


def ridge_lambda(gram: np.ndarray, ridge: float) -> float:
    """λ = ridge x mean(diag gram) (ridge itself for an all-zero diagonal): the ridge of
    `repair_next` and `obs_keep` in the units of the Gram it regularises."""
    return ridge * float(np.mean(np.diag(gram))) or ridge


def repair_next(
    w: np.ndarray, keep: np.ndarray, gram: np.ndarray, ridge: float, lam: float | None = None
) -> np.ndarray:
    """The kept columns of w (N, K) refitted: W_K + Δ, Δ = W_R G_RK (G_KK + λ I)^-1, λ = ridge x
    mean(diag G_KK) unless `lam` gives it (see the module doc); float32 (N, |keep|)."""
    k = w.shape[1]
    removed = np.setdiff1d(np.arange(k), keep)
    w64 = np.asarray(w, np.float64)
    if removed.size == 0:
        return np.ascontiguousarray(w[:, keep], np.float32)
    g = np.asarray(gram, np.float64)
    gkk = g[np.ix_(keep, keep)]
    if lam is None:
        lam = ridge_lambda(gkk, ridge)
    rhs = g[np.ix_(keep, removed)] @ w64[:, removed].T  # (|K|, N)
    delta_t = np.linalg.solve(gkk + lam * np.eye(keep.size), rhs)
    return np.ascontiguousarray(w64[:, keep] + delta_t.T, np.float32)


def obs_keep(
    w: np.ndarray, gram: np.ndarray, keep: int, lam: float
) -> tuple[np.ndarray, np.ndarray]:
    """(kept column indices, ascending; the compensated w (N, K) float64, removed columns 0):
    the `keep` input columns of w (N, K) that survive a greedy structured Optimal Brain Surgeon
    pass (Hassibi & Stork 1993; whole columns as Kurtic et al. 2023, ZipLM). On H = G + λ I,
    removing column j once the others absorb it costs ||W[:, j]||^2 / [H^-1]_jj; the cheapest
    goes, W takes the compensation -W[:, j] [H^-1]_j: / [H^-1]_jj and H^-1 loses row and column
    j (rank-one downdate), until `keep` remain. The compensations add up to `repair_next` of the
    kept set with the same λ (a test holds the two equal)."""
    k = w.shape[1]
    w64 = np.array(w, np.float64)
    if keep >= k:
        return np.arange(k), w64
    hinv = np.linalg.inv(np.asarray(gram, np.float64) + lam * np.eye(k))
    alive = np.ones(k, bool)
    for _ in range(k - keep):
        col_sq = (w64 * w64).sum(axis=0)
        cost = np.where(alive, col_sq / np.where(alive, np.diag(hinv), 1.0), np.inf)
        j = int(np.argmin(cost))
        row = hinv[j] / hinv[j, j]
        w64 -= np.outer(w64[:, j], row)
        hinv -= np.outer(hinv[:, j], row)
        alive[j] = False
        w64[:, j] = 0.0
        hinv[j, :] = 0.0
        hinv[:, j] = 0.0
    return np.flatnonzero(alive), w64


def prune_layer(
    lw: LayerWeights,
    head_dim: int,
    ffn_ratio: float,
    heads_ratio: float,
    unit: str,
    norms: tuple[np.ndarray, np.ndarray] | None = None,
    grams: tuple[np.ndarray, np.ndarray] | None = None,
    ridge: float = 0.01,
    obs: bool = False,
) -> LayerWeights:
    """One block pruned; `norms` = (FFN channel norms (F,), query head norms (H,)) for the
    activation-aware score, None for L1; `grams` = (down_proj input Gram (F, F), o_proj input
    Gram (H hd, H hd)) to repair down_proj and o_proj (`repair_next`), None for no repair;
    `obs`: FFN channels chosen by `obs_keep` on the down_proj Gram (heads by `norms`)."""
    f_act, h_act = norms if norms is not None else (None, None)
    down_lam = None
    if obs:
        if grams is None:
            raise ValueError('prune.score = "obs" needs the down_proj input Gram (repair = true)')
        g = np.asarray(grams[0], np.float64)
        down_lam = ridge_lambda(g, ridge)
        kept = _kept_count(lw.w_up.shape[0], ffn_ratio, FFN_MULTIPLE)
        ch, _ = obs_keep(lw.w_down, g, kept, down_lam)
    else:
        ch = ffn_keep(lw.w_gate, lw.w_up, lw.w_down, ffn_ratio, act=f_act)
    q_heads, kv_heads = decoder_heads_keep(lw, head_dim, heads_ratio, unit, act=h_act)
    qr, kvr = _rows(q_heads, head_dim), _rows(kv_heads, head_dim)
    down, wo = _take(lw.w_down, ch, axis=1), _take(lw.wo, qr, axis=1)
    if grams is not None:  # (obs: the λ its choice assumed, on the whole Gram's diagonal)
        down = repair_next(lw.w_down, ch, grams[0], ridge, down_lam)
        wo = repair_next(lw.wo, qr, grams[1], ridge)
    return dataclasses.replace(
        lw,
        wq=_take(lw.wq, qr),
        wk=_take(lw.wk, kvr),
        wv=_take(lw.wv, kvr),
        wo=wo,
        w_gate=_take(lw.w_gate, ch),
        w_up=_take(lw.w_up, ch),
        w_down=down,
        bq=_take(lw.bq, qr),
        bk=_take(lw.bk, kvr),
        bv=_take(lw.bv, kvr),
    )


def prune_decoder(
    weights: DecoderWeights, spec: PruneSpec, norms=None, grams=None
) -> DecoderWeights:
    """A new DecoderWeights with every block pruned at its ratios (the input is not changed).
    `norms`: per block (FFN channel norms, query head norms) of the unpruned model on the
    calibration windows, required when spec.score is "activation"; `grams`: per block (down_proj
    input Gram, o_proj input Gram) of the same, required when spec.repair."""
    if spec.repair and (grams is None or len(grams) != weights.config.n_layers):
        raise ValueError(
            "prune.repair = true needs the input Gram matrices of every block "
            "(compress/sequential.py: activation_grams)"
        )
    c = weights.config
    bad = [i for i, _, _ in spec.blocks if i >= c.n_layers]
    if bad:
        raise ValueError(
            f"prune.blocks names block {bad[0]}, the model has {c.n_layers} (0-{c.n_layers - 1})"
        )
    scored = spec.score in ("activation", "obs")
    if scored and (norms is None or len(norms) != c.n_layers):
        raise ValueError(
            f"prune.score = {spec.score!r} needs the activation norms of every "
            "block (compress/observe.py: activation_norms)"
        )
    layers = []
    for i, lw in enumerate(weights.layers):
        f, h = spec.ratios(i)
        layers.append(
            prune_layer(
                lw,
                c.head_dim,
                f,
                h,
                spec.head_unit,
                norms[i] if scored else None,
                grams[i] if spec.repair else None,
                spec.repair_ridge,
                obs=spec.score == "obs",
            )
        )
    return dataclasses.replace(weights, layers=layers)


# ----------------------------------------------------------------------------------------------
# MiniLM (BERT): the checkpoint's own dict of arrays


def prune_minilm(
    params: dict[str, np.ndarray], n_heads: int, spec: PruneSpec
) -> dict[str, np.ndarray]:
    """A new params dict with every encoder layer pruned (heads: BERT has no GQA, head_unit
    "kv" is the same as "query" there). L1 only: the activation score is a decoder's."""
    if spec.score != "l1":
        raise ValueError(
            f"prune.score = {spec.score!r}: MiniLM prunes by L1 only (score = "
            '"activation" calibrates on a decoder\'s corpus)'
        )
    out = dict(params)
    hidden = params["embeddings.word_embeddings.weight"].shape[1]
    hd = hidden // n_heads
    n_layers = 1 + max(int(k.split(".")[2]) for k in params if k.startswith("encoder.layer."))
    bad = [i for i, _, _ in spec.blocks if i >= n_layers]
    if bad:
        raise ValueError(
            f"prune.blocks names block {bad[0]}, the model has {n_layers} (0-{n_layers - 1})"
        )
    for i in range(n_layers):
        p = f"encoder.layer.{i}."
        f_ratio, h_ratio = spec.ratios(i)
        inter, out_d = p + "intermediate.dense", p + "output.dense"
        ch = ffn_keep(
            None,
            params[inter + ".weight"],
            params[out_d + ".weight"],
            f_ratio,
            params[inter + ".bias"],
        )
        out[inter + ".weight"] = _take(params[inter + ".weight"], ch)
        out[inter + ".bias"] = _take(params[inter + ".bias"], ch)
        out[out_d + ".weight"] = _take(params[out_d + ".weight"], ch, axis=1)
        q, k, v, o = (
            p + s
            for s in (
                "attention.self.query",
                "attention.self.key",
                "attention.self.value",
                "attention.output.dense",
            )
        )
        nh = params[q + ".weight"].shape[0] // hd
        stacked = np.concatenate([params[n + ".weight"] for n in (q, k, v)], axis=1)  # (nh hd, 3H)
        score = _head_scores(stacked, params[o + ".weight"], nh, hd)
        for n in (q, k, v):
            score += np.abs(params[n + ".bias"]).reshape(nh, hd).sum(axis=1)
        rows = _rows(_top(score, _kept_count(nh, h_ratio, 1)), hd)
        for n in (q, k, v):
            out[n + ".weight"] = _take(params[n + ".weight"], rows)
            out[n + ".bias"] = _take(params[n + ".bias"], rows)
        out[o + ".weight"] = _take(params[o + ".weight"], rows, axis=1)
    return out


# ----------------------------------------------------------------------------------------------
# Shapes for the device model


def pruned_spec(spec: ModelSpec, prune: PruneSpec | None) -> ModelSpec:
    """The ModelSpec of `spec` pruned by `prune` with the same kept-count rounding as the
    weights (so the device model costs the real smaller matrices). The op graph has one shape
    per model, so per-block ratios that differ between blocks are refused here."""
    if prune is None or (prune.ffn == 0 and prune.heads == 0 and not prune.blocks):
        return spec
    ratios = {prune.ratios(i) for i in range(spec.n_layers)}
    if len(ratios) > 1:
        raise ValueError(
            f"prune.blocks: blocks with different ratios {sorted(ratios)}: the "
            "device model's op graph has one block shape per model"
        )
    ffn, heads = ratios.pop()
    group = spec.n_heads // spec.n_kv_heads
    nh, nkv = spec.n_heads, spec.n_kv_heads
    if heads and prune.head_unit == "query" and group > 1:
        nh = nkv * _kept_count(group, heads, 1)
    elif heads:
        nkv = _kept_count(nkv, heads, 1)
        nh = nkv * group
    label = prune.label
    return dataclasses.replace(
        spec,
        name=f"{spec.name}+{label}",
        n_heads=nh,
        n_kv_heads=nkv,
        intermediate=_kept_count(spec.intermediate, ffn, FFN_MULTIPLE),
        published_params=0,
    )


def decoder_spec(config: DecoderConfig) -> ModelSpec:
    """The ModelSpec (device-model shapes) of a decoder read from a checkpoint."""
    return config.to_spec(source="checkpoint metadata")
