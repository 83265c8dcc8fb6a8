"""Distillation of a pruned decoder on the unpruned one: the fine-tuning that pruning needs.

    student = distill_decoder(teacher, student, windows, epochs=1, lr=5e-5, params="ffn")

The least-squares repair (model/prune.py: repair_next) refits each block's down_proj so that its
*own* output stays what the unpruned block gave; on SmolLM2-135M at 10% FFN pruning that lowers
the held-out KLD by ~18% and no linear refit of one Linear gets past ~22% (docs/
quantization-methods.md). What is left is what the literature prescribes after pruning: training
on the model's output. Here that is knowledge distillation (Hinton et al. 2015) with the
unpruned model as the teacher: for every calibration window, the loss is the mean over its
positions of KL(teacher's next-token distribution || the pruned model's), and Adam (Kingma & Ba
2015) steps the trained matrices once per window, in a seeded order, `epochs` passes.

What is trained: `params = "down"`: each block's down_proj (the Linear the repair refits);
`"ffn"`: the kept rows of gate_proj and up_proj too. Everything else (attention, norms, the
embedding and head) stays the teacher's. Shapes do not change, so a distilled model is stored,
quantized and costed like any pruned one.

The training forward is the FP32 reference forward of runtime/llama.py (LlamaRef), written again
here with what its backward needs kept (each block's inputs, normalizers, attention
probabilities, FFN pre-activations); tests/model/test_distill.py holds its logits to LlamaRef's
and its gradients to finite differences, on every architecture the loader reads (Llama,
Qwen2's biases, Qwen3's q/k norms, Gemma 3's post norms, GELU, sliding windows, scales). Plain
NumPy float32: one window of 128 tokens of SmolLM2-135M takes ~2 s (teacher forward, student
forward and backward) on two cores.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from harmony_ref.kernels.norm import GELU_CUBIC, GELU_TANH_SCALE
from harmony_ref.kernels.rope import rope_table
from harmony_ref.model.decoder import DecoderWeights

TRAINED_MATRICES = {"down": ("w_down",), "ffn": ("w_gate", "w_up", "w_down")}  # distill_params
ADAM_BETAS = (0.9, 0.999)  # Kingma & Ba 2015, section 2: the defaults
ADAM_EPS = 1e-12  # tiny: a weight whose gradient is zero throughout stays put


class TrainingForward:
    """Forward over DecoderWeights keeping what the backward reads; `backward` returns, per
    block, the gradients of the loss w.r.t. that block's gate_proj, up_proj and down_proj."""

    def __init__(self, weights: DecoderWeights, max_tokens: int):
        self.w = weights
        self.c = c = weights.config
        self.eps = np.float32(c.norm_eps)
        self.rope = {
            theta: tuple(a[:, None, :] for a in rope_table(max_tokens, c.head_dim, theta))
            for theta in {c.layer_rope_theta(i) for i in range(c.n_layers)}
        }
        pos = np.arange(max_tokens)
        self.causal = pos[None, :] <= pos[:, None]  # (query, key)
        self.local = self.causal & (pos[None, :] > pos[:, None] - c.sliding_window)

    # pieces and their backwards --------------------------------------------------------------
    def _rms(self, x, weight):
        r = 1 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + self.eps)
        return x * r * weight, r

    @staticmethod
    def _rms_back(dy, x, r, weight):
        g = dy * weight
        return r * (g - x * (r * r) * (g * x).mean(axis=-1, keepdims=True))

    def _rope(self, x, theta, sign=1.0):
        """RoPE on (T, heads, hd); sign -1 rotates back (the backward of a rotation)."""
        cos, sin = self.rope[theta]
        t, half = x.shape[0], x.shape[-1] // 2
        c, s = cos[:t], np.float32(sign) * sin[:t]
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)

    def _act(self, g):
        """(activation(g), d activation / d g)."""
        if self.c.activation == "gelu_tanh":
            k, a = np.float32(GELU_TANH_SCALE), np.float32(GELU_CUBIC)
            th = np.tanh(k * (g + a * g * g * g))
            out = np.float32(0.5) * g * (1 + th)
            grad = np.float32(0.5) * (1 + th) + np.float32(0.5) * g * (1 - th * th) * k * (
                1 + 3 * a * g * g
            )
            return out, grad
        sg = 1 / (1 + np.exp(-g))
        return g * sg, sg * (1 + g * (1 - sg))

    # forward ---------------------------------------------------------------------------------
    def forward(self, tokens, keep: bool = False):
        """(T, V) float32 logits of `tokens` from an empty cache; `keep`: also what the backward
        needs (pass it to `backward`)."""
        c, w = self.c, self.w
        t = len(tokens)
        x = w.embed[np.asarray(tokens)] * np.float32(c.embed_scale)
        saved = []
        for i, lw in enumerate(w.layers):
            nh, nkv, hd = lw.wq.shape[0] // c.head_dim, lw.wk.shape[0] // c.head_dim, c.head_dim
            group, theta = nh // nkv, c.layer_rope_theta(i)
            h, r_attn = self._rms(x, lw.attn_norm)
            q, k, v = h @ lw.wq.T, h @ lw.wk.T, h @ lw.wv.T
            if c.attention_bias:
                q, k, v = q + lw.bq, k + lw.bk, v + lw.bv
            q, k, v = q.reshape(t, nh, hd), k.reshape(t, nkv, hd), v.reshape(t, nkv, hd)
            qn = kn = r_q = r_k = None
            if c.qk_norm:
                qn, kn = q, k
                q, r_q = self._rms(q, lw.q_norm)
                k, r_k = self._rms(k, lw.k_norm)
            q, k = self._rope(q, theta), self._rope(k, theta)
            keys = np.repeat(k, group, axis=1).transpose(1, 2, 0)  # (H, hd, T)
            vals = np.repeat(v, group, axis=1).transpose(1, 0, 2)  # (H, T, hd)
            mask = (self.local if c.is_local(i) else self.causal)[:t, :t]
            s = np.where(mask, (q.transpose(1, 0, 2) @ keys) * np.float32(c.query_scale), -np.inf)
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
            a = (p @ vals).transpose(1, 0, 2).reshape(t, nh * hd)
            o = a @ lw.wo.T
            o_pre, r_o = o, None
            if c.post_norms:
                o, r_o = self._rms(o, lw.post_attn_norm)
            x_mid = x + o
            h2, r_ffn = self._rms(x_mid, lw.ffn_norm)
            g, u = h2 @ lw.w_gate.T, h2 @ lw.w_up.T
            act, act_grad = self._act(g)
            m = act * u
            f = m @ lw.w_down.T
            f_pre, r_f = f, None
            if c.post_norms:
                f, r_f = self._rms(f, lw.post_ffn_norm)
            if keep:
                saved.append(
                    (x, h, r_attn, qn, kn, r_q, r_k, q, k, v, p, a, o_pre, r_o)
                    + (x_mid, h2, r_ffn, act, act_grad, u, m, f_pre, r_f)
                )
            x = x_mid + f
        hf, r_final = self._rms(x, w.final_norm)
        logits = hf @ w.head.T
        return (logits, (saved, x, r_final)) if keep else logits

    # backward --------------------------------------------------------------------------------
    def backward(self, dlogits: np.ndarray, state) -> list[dict[str, np.ndarray]]:
        """Per block {"w_gate", "w_up", "w_down"}: d loss / d weight, for d loss / d logits."""
        c, w = self.c, self.w
        saved, x_last, r_final = state
        t = dlogits.shape[0]
        dx = self._rms_back(dlogits @ w.head, x_last, r_final, w.final_norm)
        grads: list[dict[str, np.ndarray]] = [{} for _ in w.layers]
        for i in range(len(w.layers) - 1, -1, -1):
            lw = w.layers[i]
            (x, h, r_attn, qn, kn, r_q, r_k, q, k, v, p, a, o_pre, r_o) = saved[i][:14]
            (x_mid, h2, r_ffn, act, act_grad, u, m, f_pre, r_f) = saved[i][14:]
            nh, nkv, hd = q.shape[1], k.shape[1], c.head_dim
            group, theta = nh // nkv, c.layer_rope_theta(i)
            # FFN: x_out = x_mid + post_norm(m @ down^T), m = act(h2 gate^T) * (h2 up^T)
            df = self._rms_back(dx, f_pre, r_f, lw.post_ffn_norm) if c.post_norms else dx
            dm = df @ lw.w_down
            du, dg = dm * act, dm * u * act_grad
            grads[i] = {"w_down": df.T @ m, "w_gate": dg.T @ h2, "w_up": du.T @ h2}
            dh2 = dg @ lw.w_gate + du @ lw.w_up
            dx_mid = dx + self._rms_back(dh2, x_mid, r_ffn, lw.ffn_norm)
            # attention: x_mid = x + post_norm(a @ wo^T)
            do = self._rms_back(dx_mid, o_pre, r_o, lw.post_attn_norm) if c.post_norms else dx_mid
            da = (do @ lw.wo).reshape(t, nh, hd).transpose(1, 0, 2)  # (H, T, hd)
            vals = np.repeat(v, group, axis=1).transpose(1, 0, 2)
            dp = da @ vals.transpose(0, 2, 1)  # (H, T, T)
            dvals = p.transpose(0, 2, 1) @ da
            ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True)) * np.float32(c.query_scale)
            dq = (ds @ np.repeat(k, group, axis=1).transpose(1, 0, 2)).transpose(1, 0, 2)
            dkeys = ds.transpose(0, 2, 1) @ q.transpose(1, 0, 2)  # (H, T, hd)
            dk = dkeys.reshape(nkv, group, t, hd).sum(axis=1).transpose(1, 0, 2)
            dv = dvals.reshape(nkv, group, t, hd).sum(axis=1).transpose(1, 0, 2)
            dq, dk = self._rope(dq, theta, -1.0), self._rope(dk, theta, -1.0)
            if c.qk_norm:
                dq = self._rms_back(dq, qn, r_q, lw.q_norm)
                dk = self._rms_back(dk, kn, r_k, lw.k_norm)
            dh = (
                dq.reshape(t, nh * hd) @ lw.wq
                + dk.reshape(t, nkv * hd) @ lw.wk
                + dv.reshape(t, nkv * hd) @ lw.wv
            )
            dx = dx_mid + self._rms_back(dh, x, r_attn, lw.attn_norm)
        return grads


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def kl_loss(student_logits: np.ndarray, teacher_logp: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean over positions of KL(teacher || student) (nats), and its gradient w.r.t. the
    student's logits (softmax in float64; the gradient in the logits' dtype)."""
    lp = log_softmax(student_logits.astype(np.float64))
    pt = np.exp(teacher_logp)
    n = lp.shape[0]
    kl = float((pt * (teacher_logp - lp)).sum() / n)
    return kl, ((np.exp(lp) - pt) / n).astype(student_logits.dtype)


def distill_decoder(
    teacher: DecoderWeights,
    student: DecoderWeights,
    windows: np.ndarray,
    epochs: int,
    lr: float,
    params: str = "ffn",
    seed: int = 0,
    report: Callable[[int, int], None] | None = None,
) -> tuple[DecoderWeights, list[float]]:
    """`student` (a pruned `teacher`) with its `params` matrices trained to match the teacher's
    next-token distributions on `windows` ((N, T) token ids; each a sequence from an empty
    cache), and the mean training KL of each epoch. Neither input is changed. `report(done,
    total)` after each window."""
    if params not in TRAINED_MATRICES:
        raise ValueError(f"params = {params!r}: must be one of {sorted(TRAINED_MATRICES)}")
    windows = np.asarray(windows, np.int64)
    if windows.ndim != 2 or windows.shape[1] < 2:
        raise ValueError(f"windows must be (N, T >= 2) token ids, got shape {windows.shape}")
    names = TRAINED_MATRICES[params]
    layers = [
        dataclasses.replace(lw, **{n: np.array(getattr(lw, n), np.float32) for n in names})
        for lw in student.layers
    ]
    trained = dataclasses.replace(student, layers=layers)
    teacher_fwd = TrainingForward(teacher, windows.shape[1])
    student_fwd = TrainingForward(trained, windows.shape[1])
    weights = [getattr(lw, n) for lw in layers for n in names]  # updated in place
    m1 = [np.zeros_like(wt) for wt in weights]
    m2 = [np.zeros_like(wt) for wt in weights]
    (b1, b2), step = ADAM_BETAS, 0
    rng = np.random.default_rng(seed)
    losses: list[float] = []
    total = epochs * len(windows)
    for _ in range(epochs):
        kl_sum = 0.0
        for j, wi in enumerate(rng.permutation(len(windows))):
            tokens = windows[wi]
            teacher_logp = log_softmax(teacher_fwd.forward(tokens).astype(np.float64))
            logits, state = student_fwd.forward(tokens, keep=True)
            kl, dlogits = kl_loss(logits, teacher_logp)
            grads = student_fwd.backward(dlogits, state)
            step += 1
            corr1, corr2 = 1 - b1**step, 1 - b2**step
            flat = [g[n] for g in grads for n in names]
            for wt, g, a, b in zip(weights, flat, m1, m2):
                a *= b1
                a += (1 - b1) * g
                b *= b2
                b += (1 - b2) * g * g
                wt -= (lr * (a / corr1) / (np.sqrt(b / corr2) + ADAM_EPS)).astype(np.float32)
            kl_sum += kl
            if report is not None:
                report(len(losses) * len(windows) + j + 1, total)
        losses.append(kl_sum / len(windows))
    return trained, losses
