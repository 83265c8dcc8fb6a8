"""llama.cpp's type mixes (llama-quantize's Q4_K_M ...) as rules over a model's weights: which
GGUF type each tensor gets from its role, its layer's index among the model's layers and its row
length. A policy names one (`mix = "q4_k_m"` in harmony_ref/policies/q4_k_m.toml); the rule
depends on the layer count and the row lengths, which no name pattern can say once for every
model, so a policy with a mix is bound to one model before any weight gets a format
(quant/policy.py Policy.bind: one explicit [layers] entry per weight).

Q4_K_M, from llama.cpp's src/llama-quant.cpp (the vendored copy of commit 0c1e570,
llama_tensor_get_type_impl and tensor_type_fallback), for a dense (no experts), non-Falcon model:

    output (lm_head; the token embedding too when it is the tied head)
                        Q6_K, or Q8_0 when its rows are not a multiple of Q4_K's 256
    attn_v (v_proj)     Q6_K in the layers use_more_bits picks, else Q4_K
    ffn_down            Q6_K in the layers use_more_bits picks, else Q4_K
    everything else     Q4_K (the mix's default type)
    use_more_bits(i, n) = i < n/8 or i >= 7n/8 or (i - n/8) % 3 == 2   (integer division)
then the fallback for rows a type cannot store: Q4_K -> Q5_0, Q6_K -> Q8_0 (K not a multiple of
256), and F16 when even that block does not divide K. Left out, as they do not apply to the
models this project runs: the 70B attn_v bump, the 8-expert rules, Falcon's ffn_down, the fused
attn_qkv (ours are separate q/k/v). The embedding is taken as the tied head: llama.cpp gives an
untied token_embd the default type, and our GGUF export writes token_embd in lm_head's format.
"""

from __future__ import annotations

import re

from harmony_ref.quant.formats import FACTS

LAYER_RE = re.compile(r"(?:^|\.)layers?\.(\d+)\.")  # model.layers.{i}. / encoder.layer.{i}.
EMBEDDINGS = ("embed_tokens", "word_embeddings")
# tensor_type_fallback: the 32-block type a 256-block K-quant falls back to
FALLBACK = {"q4_k": "q5_0", "q6_k": "q8_0"}
FALLBACK_LAST = "fp16"  # when even the fallback's block does not divide K


def use_more_bits(i: int, n: int) -> bool:
    """llama-quant.cpp's use_more_bits: the first and last eighth of the layers and every third
    one between them."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _fallback(fmt: str, k: int) -> str:
    """tensor_type_fallback: `fmt`, or the type llama.cpp stores rows of length K in instead."""
    if k % FACTS[fmt].block == 0:
        return fmt
    fmt = FALLBACK.get(fmt, FALLBACK_LAST)
    return fmt if k % max(FACTS[fmt].block, 1) == 0 else FALLBACK_LAST


def q4_k_m(name: str, k: int, n_layers: int) -> str:
    """The format llama.cpp's Q4_K_M gives the weight `name` with rows of length K in a model of
    `n_layers` layers."""
    short = name.rsplit(".", 1)[-1]
    if short == "lm_head" or short in EMBEDDINGS:  # the output (tied: the embedding too)
        return "q8_0" if k % FACTS["q4_k"].block else "q6_k"
    m = LAYER_RE.search(name)
    more = m is not None and use_more_bits(int(m.group(1)), n_layers)
    wanted = "q6_k" if short in ("v_proj", "down_proj") and more else "q4_k"
    return _fallback(wanted, k)


MIXES = {"q4_k_m": q4_k_m}  # a policy's `mix` -> its rule (name, K, layer count) -> format name
MIX_DEFAULTS = {"q4_k_m": "q4_k"}  # the type the mix starts every tensor from (its `default`)
