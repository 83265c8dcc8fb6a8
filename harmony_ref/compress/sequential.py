"""Calibration-aware quantization of a decoder, block by block (GPTQ and AWQ, quant/gptq.py and
quant/awq.py): every Linear is fitted on its own inputs on the calibration windows, as the model
being built computes them, so each layer sees the already quantized layers before it (the GPTQ
paper's sequential rule, and within a block its "true sequential" order: q|k|v, then o, then
gate|up, then down).

    base = Llama(weights, fp32 policy, max_context=sample_tokens)
    weights2, stored = calibrate_weights(base, weights, policy, windows)   # compress/ calls it
    # weights2: AWQ's scales folded in (norm weights, v / up rows, weight columns);
    # stored: Linear name -> GPTQ-fitted Int4Tensor / Int8Tensor

Per block i, with the residual streams of every window after blocks 0 .. i-1 (as quantized):
1. AWQ, where any Linear of a stage says "awq": one FP32 pass of the block records each stage's
   input Gram matrix X^T X and mean |x| per channel; a scale per input channel is searched for
   every such stage and folded (quant/awq.py: into the attention / FFN RMSNorm weight, v_proj's
   rows for o_proj, up_proj's rows for down_proj; exact in FP32). A stage's scale applies to
   every Linear reading that input.
2. Stage by stage: where a stage holds a "gptq" Linear, the block runs (earlier stages already
   in their stored formats) up to that stage and H = 2 X^T X / n of its input is collected, and
   each of its GPTQ Linears is fitted on it (q, k and v share H: GPTQ treats rows independently,
   so fitting them apart equals fitting the fused matrix). The stage is then rebuilt in its
   stored formats (GPTQ tensors, round-to-nearest for the rest).
3. The block, now quantized, runs on the windows to give block i + 1 its inputs.
The output head comes last, on the final-normed streams (AWQ folds into the final norm; a tied
head becomes its own matrix). The windows come from the calibration split (compress/observe.py
calibration_windows); nothing here reads the held-out split.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from harmony_ref.model.decoder import layer_name
from harmony_ref.quant.awq import awq_search
from harmony_ref.quant.gptq import gptq_quantize
from harmony_ref.quant.policy import format_for_rows
from harmony_ref.runtime.llama import STAGE_PARTS, stage_linear
from harmony_ref.runtime.progress import report

STAGES = tuple(STAGE_PARTS)  # in the order a block runs them


class _Stop(Exception):
    """Raised by the last watched stage: the rest of the block is not needed."""


class InputStats:
    """Running X^T X (float64), sum |x| per channel and token count of one stage's inputs.
    Inputs are stacked until BATCH_ROWS rows before each product: one (K, ~2048) x (~2048, K)
    GEMM instead of sixteen of 128 rows (a window each) keeps BLAS at its rate between the
    Numba kernels of the forward."""

    BATCH_ROWS = 2048

    def __init__(self):
        self._gram, self._abs_sum, self.n = None, None, 0
        self._pending: list[np.ndarray] = []
        self._pending_rows = 0

    def add(self, x) -> None:
        x = np.asarray(x, np.float64).reshape(-1, np.shape(x)[-1])
        if not np.isfinite(x).all():
            raise ValueError("calibration activations contain NaN/Inf")
        self._pending.append(x)
        self._pending_rows += x.shape[0]
        self.n += x.shape[0]
        if self._pending_rows >= self.BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        x = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending, self._pending_rows = [], 0
        g, a = x.T @ x, np.abs(x).sum(axis=0)
        if self._gram is None:
            self._gram, self._abs_sum = g, a
        else:
            self._gram += g
            self._abs_sum += a

    @property
    def gram(self) -> np.ndarray | None:
        self._flush()
        return self._gram

    @property
    def abs_sum(self) -> np.ndarray | None:
        self._flush()
        return self._abs_sum

    @property
    def hessian(self) -> np.ndarray:
        return 2.0 * self.gram / max(self.n, 1)

    @property
    def mean_abs(self) -> np.ndarray:
        return self.abs_sum / max(self.n, 1)


class _Watch:
    def __init__(self, inner, stats: InputStats, stop: bool):
        self.inner, self.stats, self.stop = inner, stats, stop

    def __call__(self, x):
        self.stats.add(x)
        if self.stop:
            raise _Stop
        return self.inner(x)


def stage_inputs(model, i: int, xs, stages, stop: bool = True) -> dict[str, InputStats]:
    """Run block i of `model` on every window's stream in xs, recording the inputs of `stages`
    (stopping after the last one when `stop`); the block's stages are restored."""
    b = model.blocks[i]
    stats = {st: InputStats() for st in stages}
    saved = [(st, getattr(b, st)) for st in stages]
    last = max(stages, key=STAGES.index)
    for st, inner in saved:
        setattr(b, st, _Watch(inner, stats[st], stop and st == last))
    try:
        for x in xs:
            try:
                model.run_block(i, x)
            except _Stop:
                pass
    finally:
        for st, inner in saved:
            setattr(b, st, inner)
        b.cache.reset()
    return stats


def set_stage(model, i: int, stage: str, lw, policy, stored: dict) -> None:
    """Rebuild stage `stage` (qkv, o, gate_up, down) of `model`'s block i from layer weights `lw`
    in `policy`'s formats, GPTQ-fitted tensors from `stored` (no static activation scales while
    fitting); the norms and the q|k|v bias follow `lw` (AWQ folds its scales into them)."""
    if stage not in STAGE_PARTS:
        raise ValueError(f"unknown stage {stage!r}")
    b = model.blocks[i]
    setattr(b, stage, stage_linear(i, stage, lw, policy, {}, stored))
    if stage == "qkv":
        b.attn_norm = lw.attn_norm
        if model.config.attention_bias:
            b.qkv_bias = np.concatenate([lw.bq, lw.bk, lw.bv]).astype(np.float32)
    elif stage == "gate_up":
        b.ffn_norm = lw.ffn_norm


def activation_grams(model, windows) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per block of `model` (FP32, unpruned): the Gram matrices X^T X (float64) of the inputs
    of down_proj (F, F) and o_proj (H hd, H hd) over every token of every window, block by
    block (pruning's repair, model/prune.py: repair_next; their diagonals are the squared
    activation norms the activation score reads)."""
    xs = [model.embed[w] * model.embed_scale for w in np.asarray(windows)]
    out = []
    for i in range(len(model.blocks)):
        st = stage_inputs(model, i, xs, ["o", "down"], stop=False)
        out.append((st["down"].gram, st["o"].gram))
        xs = [model.run_block(i, x) for x in xs]
        report("Gram pass over the calibration windows (blocks)", i + 1, len(model.blocks))
    return out


def _fmt_for(policy, name, k):
    return format_for_rows(policy.format_for(name), k)


def _awq_block(model, i, lw, xs, policy, methods, config):
    """Block i's layer weights with AWQ's scales folded in (see the module doc)."""
    want = [st for st in STAGES if any(methods[p] == "awq" for p, _ in STAGE_PARTS[st])]
    if not want:
        return lw
    stats = stage_inputs(model, i, xs, want, stop=False)
    q = policy.quantize
    new = {}
    hd = config.head_dim
    nh, nkv = lw.wq.shape[0] // hd, lw.wk.shape[0] // hd
    group = nh // nkv
    for st in want:
        parts = [(layer_name(i, p), getattr(lw, a)) for p, a in STAGE_PARTS[st]]
        quant = [(n, w) for n, w in parts if policy.format_for(n).facts.fitted]
        tie = None
        if st == "o":  # one scale per v channel: the query heads of a KV group share it

            def tie(m):
                kv = np.asarray(m).reshape(nkv, group, hd).mean(axis=1, keepdims=True)
                return np.broadcast_to(kv, (nkv, group, hd)).reshape(-1)

        s, _, _ = awq_search(
            [w for _, w in quant],
            [_fmt_for(policy, n, w.shape[1]) for n, w in quant],
            stats[st].gram,
            stats[st].mean_abs,
            q.grid,
            tie,
        )
        for _, a in STAGE_PARTS[st]:
            new[a] = getattr(lw, a) * s  # columns: W diag(s)
        if st == "qkv":
            new["attn_norm"] = lw.attn_norm / s
        elif st == "gate_up":
            new["ffn_norm"] = lw.ffn_norm / s
        elif st == "o":
            sv = s.reshape(nkv, group, hd)[:, 0, :].reshape(-1)  # (Hkv hd,)
            new["wv"] = new.get("wv", lw.wv) / sv[:, None]
            if lw.bv is not None:
                new["bv"] = lw.bv / sv
        else:  # down: its input is act(gate) x up
            new["w_up"] = new.get("w_up", lw.w_up) / s[:, None]
    return dataclasses.replace(
        lw, **{k: np.ascontiguousarray(v, np.float32) for k, v in new.items()}
    )


def calibrate_weights(model, weights, policy, windows):
    """(weights with AWQ folded in, {Linear name: GPTQ stored tensor}); `model` is an FP32
    runtime.llama.Llama of `weights` (max_context >= the window length), rebuilt in place."""
    c = weights.config
    q = policy.quantize
    xs = [model.embed[w] * model.embed_scale for w in np.asarray(windows)]
    stored: dict = {}
    layers = []
    for i, lw in enumerate(weights.layers):
        methods = {
            p: policy.method_for(layer_name(i, p)) for st in STAGES for p, _ in STAGE_PARTS[st]
        }
        lw = _awq_block(model, i, lw, xs, policy, methods, c)
        if lw is not weights.layers[i]:
            for st in STAGES:  # the folded weights, still FP32
                set_stage(model, i, st, lw, _fp32(policy), {})
        for st in STAGES:
            gptq = [(p, a) for p, a in STAGE_PARTS[st] if methods[p] == "gptq"]
            if gptq:
                h = stage_inputs(model, i, xs, [st])[st].hessian
                by_fmt: dict = {}  # rows are independent in GPTQ: one fit per format
                for p, a in gptq:
                    name, w = layer_name(i, p), getattr(lw, a)
                    by_fmt.setdefault(_fmt_for(policy, name, w.shape[1]), []).append((name, w))
                for fmt, parts in by_fmt.items():
                    t = gptq_quantize(
                        np.concatenate([w for _, w in parts]),
                        h,
                        fmt,
                        q.damp,
                        q.block_size,
                        q.act_order,
                    ).stored
                    r0 = 0
                    for name, w in parts:
                        stored[name] = row_slice(t, r0, r0 + w.shape[0])
                        r0 += w.shape[0]
            set_stage(model, i, st, lw, policy, stored)
        xs = [model.run_block(i, x) for x in xs]
        layers.append(lw)
        report("GPTQ / AWQ on the calibration windows (blocks)", i + 1, len(weights.layers))
    weights = dataclasses.replace(weights, layers=layers)
    method = policy.method_for("lm_head")
    if method != "rtn":
        eps = np.float32(c.norm_eps)
        hs = [
            x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weights.final_norm for x in xs
        ]
        st = InputStats()
        for h in hs:
            st.add(h)
        head = weights.head
        fmt = _fmt_for(policy, "lm_head", head.shape[1])
        if method == "gptq":
            stored["lm_head"] = gptq_quantize(
                head, st.hessian, fmt, q.damp, q.block_size, q.act_order
            ).stored
        else:
            s, _, _ = awq_search([head], [fmt], st.gram, st.mean_abs, q.grid)
            weights = dataclasses.replace(
                weights,
                lm_head=np.ascontiguousarray(head * s, np.float32),
                final_norm=np.ascontiguousarray(weights.final_norm / s, np.float32),
            )
    return weights, stored


def row_slice(t, a: int, b: int):
    """Rows a .. b - 1 of a stored Int4Tensor / Int8Tensor (exact: scales are per row)."""
    from harmony_ref.quant.int4 import Int4Tensor
    from harmony_ref.quant.int8 import Int8Tensor

    k = t.shape[1]
    if isinstance(t, Int8Tensor):
        return Int8Tensor(t.values[a:b].copy(), t.scale[a:b].copy(), (b - a, k))
    zp = None if t.zero_point is None else t.zero_point[a:b].copy()
    return Int4Tensor(
        t.packed[a:b].copy(), t.scale[a:b].copy(), zp, (b - a, k), t.group_size, t.scheme
    )


def _fp32(policy):
    from harmony_ref.quant.policy import FP32, Policy

    return Policy("fp32", FP32)
