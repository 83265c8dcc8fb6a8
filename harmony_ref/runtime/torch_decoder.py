"""The decoder of runtime/llama.py as a PyTorch module, for ExecuTorch (runtime/pte.py): the same
math as `LlamaRef` (RMSNorm, rotate-half RoPE with each layer's base, GQA, SwiGLU / GeGLU,
Qwen3 / Gemma 3 q/k norms, Gemma's post-norms, embedding scale and sliding-window layers) over
the checkpoint's FP32 weights as read (DecoderWeights), with a static KV cache and attention as
ExecuTorch's own llama export has them with its custom ops (pytorch/executorch
examples/models/llama/source_transformation/custom_kv_cache.py CustomKVCache and sdpa.py
SDPACustom, ops from executorch.extension.llm.custom_ops): one mutable buffer per layer of
`max_context` positions in (1, L, Hkv, hd), written from input_pos[0] by `llama::update_cache`,
read by `llama::custom_sdpa`, which attends causally over the filled positions only (GQA without
a copy of the cache; a local layer whose window is shorter than the cache passes its mask).

    m = TorchDecoder(weights, max_context=512)          # eager, FP32
    logits = m(tokens, input_pos)                        # tokens (1, T) int64, input_pos (T,)
    last = m.logits(tokens, input_pos, last_only=True)   # (1, 1, V): what generation reads
    quantize_for_policy(m, "w4a8-g32")                   # torchao 8da4w, as export_llama does

Needs torch (and torchao for a quantized policy): the `executorch` extra, never the default
install; nothing in the default import path imports this module.

Policy -> what ExecuTorch's LLM flow does (executorch examples/models/llama/source_transformation/
quantize.py, `quantize`), Linear by Linear from the policy's format for that name:
    fp32                                      left as is
    int4 symmetric gN + dynamic int8 acts     `8da4w`: Int8DynamicActivationIntxWeightConfig
                                              (int4, PerGroup(N), HQQ scale-only: export_llama's
                                              default use_hqq); a Linear whose K is not a multiple
                                              of N stays FP32, as the flow's filter_fn leaves it
    int8 per-channel + dynamic int8 acts      `8da8w` per channel (PerAxis(0)): the flow's
                                              `8da4w_output_8da8w` output layer
    int8 per-channel, weight-only             `int8`: the flow's WeightOnlyInt8QuantHandler
Any other format (fp16, bf16, int4 without dynamic activations, asymmetric int4, GGUF blocks)
has no ExecuTorch XNNPACK counterpart here: refused in one line naming the Linear and the
nearest policy that has one (PTE_POLICIES).
"""

from __future__ import annotations

import contextlib
import sys

import numpy as np
import torch
import torch.nn.functional as F
from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401  (llama:: ops)
from torch import nn

from harmony_ref.kernels.norm import GELU_CUBIC, GELU_TANH_SCALE
from harmony_ref.kernels.rope import rope_table
from harmony_ref.model.decoder import DecoderConfig, DecoderWeights, layer_name
from harmony_ref.quant.policy import Policy, WeightFormat, load_policy

# shipped policies with an ExecuTorch counterpart; the nearest one is named on a refusal
PTE_POLICIES = ("fp32", "int8", "w4a8-g32", "w4a8-g128")


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.tensor(np.asarray(a), dtype=torch.float32)  # a copy: the weights stay as read


def _linear(w: np.ndarray, b: np.ndarray | None = None) -> nn.Linear:
    n, k = w.shape
    lin = nn.Linear(k, n, bias=b is not None)
    with torch.no_grad():
        lin.weight.copy_(_t(w))
        if b is not None:
            lin.bias.copy_(_t(b))
    return lin


class RMSNorm(nn.Module):
    def __init__(self, weight: np.ndarray, eps: float):
        super().__init__()
        self.weight = nn.Parameter(_t(weight), requires_grad=False)
        self.eps = float(eps)

    def forward(self, x):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    """One decoder layer with its static KV cache (1, max_context, Hkv, hd)."""

    def __init__(self, lw, c, i: int, max_context: int):
        super().__init__()
        nh, nkv, _ = lw.dims(c.head_dim)
        self.n_heads, self.n_kv_heads, self.head_dim = nh, nkv, c.head_dim
        self.scale = float(c.query_scale)
        self.attn_norm = RMSNorm(lw.attn_norm, c.norm_eps)
        self.q_proj = _linear(lw.wq, lw.bq if c.attention_bias else None)
        self.k_proj = _linear(lw.wk, lw.bk if c.attention_bias else None)
        self.v_proj = _linear(lw.wv, lw.bv if c.attention_bias else None)
        self.o_proj = _linear(lw.wo)
        self.ffn_norm = RMSNorm(lw.ffn_norm, c.norm_eps)
        self.gate_proj = _linear(lw.w_gate)
        self.up_proj = _linear(lw.w_up)
        self.down_proj = _linear(lw.w_down)
        self.q_norm = RMSNorm(lw.q_norm, c.norm_eps) if c.qk_norm else None
        self.k_norm = RMSNorm(lw.k_norm, c.norm_eps) if c.qk_norm else None
        self.post_attn_norm = RMSNorm(lw.post_attn_norm, c.norm_eps) if c.post_norms else None
        self.post_ffn_norm = RMSNorm(lw.post_ffn_norm, c.norm_eps) if c.post_norms else None
        self.gelu = c.activation == "gelu_tanh"
        cos, sin = rope_table(max_context, c.head_dim, c.layer_rope_theta(i))  # (L, hd / 2)
        self.register_buffer("cos", _t(cos), persistent=False)
        self.register_buffer("sin", _t(sin), persistent=False)
        # mask[p, key] = 0 where query position p sees key, -inf elsewhere (causal, and on a local
        # layer only the last sliding_window keys)
        key, query = np.arange(max_context)[None, :], np.arange(max_context)[:, None]
        seen = key <= query
        if c.is_local(i):
            seen &= key > query - c.sliding_window
        # a causal custom_sdpa sees the same keys unless a local layer's window cuts the cache
        self.windowed = bool((~seen & (key <= query)).any())
        mask = np.where(seen, 0.0, -np.inf).astype(np.float32)
        self.register_buffer("mask", torch.from_numpy(mask), persistent=False)
        shape = (1, max_context, nkv, c.head_dim)  # CustomKVCache's layout: positions second
        self.register_buffer("k_cache", torch.zeros(shape), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape), persistent=False)

    def _rope(self, x, input_pos):  # x (1, T, heads, hd), rotate-half
        cos = self.cos[input_pos][None, :, None, :]  # (1, T, 1, hd / 2)
        sin = self.sin[input_pos][None, :, None, :]
        half = self.head_dim // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def forward(self, x, input_pos):  # x (1, T, D), input_pos (T,)
        t = x.shape[1]
        h = self.attn_norm(x)
        q = self.q_proj(h).view(1, t, self.n_heads, self.head_dim)
        k = self.k_proj(h).view(1, t, self.n_kv_heads, self.head_dim)
        v = self.v_proj(h).view(1, t, self.n_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = self._rope(q, input_pos), self._rope(k, input_pos)
        start = input_pos[0].item()
        torch.ops.llama.update_cache(k, self.k_cache, start)  # rows start .. start + T
        torch.ops.llama.update_cache(v, self.v_cache, start)
        if self.windowed:  # keys by the mask's rows (T, L)
            a = torch.ops.llama.custom_sdpa(
                q, self.k_cache, self.v_cache, 0, self.mask[input_pos], 0.0, False, self.scale
            )
        else:  # keys 0 .. start + T - 1, causal
            a = torch.ops.llama.custom_sdpa(
                q, self.k_cache, self.v_cache, start, None, 0.0, True, self.scale
            )
        a = a.reshape(1, t, self.n_heads * self.head_dim)  # from (1, T, H, hd)
        o = self.o_proj(a)
        if self.post_attn_norm is not None:
            o = self.post_attn_norm(o)
        x = x + o
        h = self.ffn_norm(x)
        g, u = self.gate_proj(h), self.up_proj(h)
        if self.gelu:
            act = 0.5 * g * (1 + torch.tanh(GELU_TANH_SCALE * (g + GELU_CUBIC * g * g * g)))
        else:
            act = F.silu(g)
        f = self.down_proj(act * u)
        if self.post_ffn_norm is not None:
            f = self.post_ffn_norm(f)
        return x + f


class TorchDecoder(nn.Module):
    """forward(tokens (1, T) int64, input_pos (T,) int64) -> logits (1, T, V) float32: the
    tokens at positions input_pos (consecutive, from the cache's current length), every
    position's logits (what the corpus scoring needs; generation reads the last: `logits`)."""

    def __init__(self, weights: DecoderWeights, max_context: int):
        super().__init__()
        c = weights.config
        if not 1 <= max_context <= c.max_positions:
            raise ValueError(
                f"--max-context {max_context}: must be 1..{c.max_positions} (the checkpoint's)"
            )
        self.config, self.max_context = c, int(max_context)
        self.embed = nn.Embedding.from_pretrained(_t(weights.embed), freeze=True)
        self.embed_scale = float(c.embed_scale)
        self.layers = nn.ModuleList(
            Block(lw, c, i, max_context) for i, lw in enumerate(weights.layers)
        )
        self.final_norm = RMSNorm(weights.final_norm, c.norm_eps)
        # the head is its own Linear even when tied: the policy's lm_head format quantizes it,
        # the embedding lookup keeps FP32 (as runtime/llama.py's Llama)
        self.lm_head = _linear(weights.head)

    def forward(self, tokens, input_pos):
        return self.logits(tokens, input_pos)

    def logits(self, tokens, input_pos, last_only: bool = False):
        """(1, T, V), or with `last_only` (1, 1, V): the last position's, the head run on it
        alone (ExecuTorch's llama export: generation reads nothing else)."""
        x = self.embed(tokens)
        if self.embed_scale != 1.0:
            x = x * self.embed_scale
        for layer in self.layers:
            x = layer(x, input_pos)
        if last_only:
            x = x[:, -1:, :]
        return self.lm_head(self.final_norm(x))

    def linears(self) -> dict[str, nn.Linear]:
        """Policy name (model/decoder.py layer_name, "lm_head") -> the Linear."""
        out = {}
        for i, layer in enumerate(self.layers):
            for short in ("q_proj", "k_proj", "v_proj", "o_proj"):
                out[layer_name(i, short)] = getattr(layer, short)
            for short in ("gate_proj", "up_proj", "down_proj"):
                out[layer_name(i, short)] = getattr(layer, short)
        out["lm_head"] = self.lm_head
        return out


# ----------------------------------------------------------------------------------------------
# Quantization as ExecuTorch's LLM flow does it


def _scheme(fmt: WeightFormat, dynamic: bool) -> str | None:
    """The flow's scheme for one Linear's format: "8da4w", "8da8w", "int8", "fp32" or None (the
    formats table's pte_* facts, quant/formats.py)."""
    return fmt.facts.pte_dynamic if dynamic else fmt.facts.pte_weight_only


def nearest_pte_policy(fmt: WeightFormat) -> str:
    nearest = fmt.facts.pte_nearest
    if nearest == "w4a8":  # the group decides: ExecuTorch's 8da4w at group 32 or 128
        return "w4a8-g128" if (fmt.group_size or 0) >= 128 else "w4a8-g32"
    return nearest


def linear_rows(c: DecoderConfig) -> dict[str, int]:
    """Linear name (model/decoder.py layer_name, "lm_head") -> its row length K."""
    k = {"q_proj": c.dim, "k_proj": c.dim, "v_proj": c.dim, "o_proj": c.q_dim}
    k |= {"gate_proj": c.dim, "up_proj": c.dim, "down_proj": c.ffn_dim}
    out = {layer_name(i, short): n for i in range(c.n_layers) for short, n in k.items()}
    return out | {"lm_head": c.dim}


def pte_plan(config: DecoderConfig, policy: str | Policy) -> dict[str, tuple[str, int]]:
    """Linear name -> (scheme, group size) the flow applies under `policy`, from the config
    alone (checked before any weight is read); ValueError in one line when a Linear's format
    has no counterpart, or the policy prunes, calibrates or has static activations."""
    pol = policy if isinstance(policy, Policy) else load_policy(policy)
    if pol.prune or pol.activations or pol.calibrated:
        what = "[prune]" if pol.prune else "[activations]" if pol.activations else "[quantize]"
        raise ValueError(
            f"--policy {pol.name}: its {what} table has no ExecuTorch counterpart; "
            f"the nearest policy that has one: {nearest_pte_policy(pol.default)}"
        )
    dynamic = pol.dynamic_activations == "int8"
    plan = {}
    for name, k in linear_rows(config).items():
        fmt = pol.format_for(name)
        scheme = _scheme(fmt, dynamic)
        if scheme is None:
            raise ValueError(
                f"--policy {pol.name}: {name} in {fmt.name} has no ExecuTorch XNNPACK "
                f"counterpart; the nearest policy that has one: {nearest_pte_policy(fmt)}"
            )
        group = fmt.group_size if scheme == "8da4w" else 0
        if group and k % group:
            scheme, group = "fp32", 0  # the flow's filter_fn: K not a multiple of the group
        plan[name] = (scheme, group)
    return plan


def quantize_for_policy(model: TorchDecoder, policy: str | Policy) -> dict[str, tuple[str, int]]:
    """Quantize `model`'s Linears in place as the flow does under `policy`; returns pte_plan."""
    plan = pte_plan(model.config, policy)
    if all(s == "fp32" for s, _ in plan.values()):
        return plan
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup

    by_config: dict[tuple[str, int], set[nn.Linear]] = {}
    lin = model.linears()
    for name, key in plan.items():
        if key[0] != "fp32":
            by_config.setdefault(key, set()).add(lin[name])
    with torch.no_grad():
        for (scheme, group), mods in by_config.items():
            if scheme == "int8":
                _weight_only_int8(model, mods)
                continue
            config = Int8DynamicActivationIntxWeightConfig(
                weight_dtype=torch.int4 if scheme == "8da4w" else torch.int8,
                weight_granularity=PerGroup(group) if group else PerAxis(0),
                intx_choose_qparams_algorithm="hqq_scale_only",
            )
            quantize_(model, config, filter_fn=lambda m, fqn, mods=mods: m in mods)
    return plan


def _weight_only_int8(model: nn.Module, mods: set[nn.Linear]) -> None:
    """The flow's `int8` mode (WeightOnlyInt8QuantHandler: int8 per output channel, scales in
    the weight's dtype) on the Linears in `mods`."""
    from executorch.examples.models.llama.source_transformation.quantize import (
        WeightOnlyInt8Linear,
        dynamically_quantize_per_channel,
    )

    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if child not in mods:
                continue
            q = WeightOnlyInt8Linear("cpu", child.in_features, child.out_features, bias=False)
            with contextlib.redirect_stdout(sys.stderr):
                w, scales, _ = dynamically_quantize_per_channel(
                    child.weight.float(), -128, 127, torch.int8, None, scales_dtype=torch.float32
                )
            q.weight.copy_(w)
            q.scales = scales.squeeze(-1).to(torch.float32)
            setattr(parent, child_name, q)
