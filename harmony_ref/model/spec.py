"""Model specs: the shapes (and what a forward needs besides weights) of real open models, as
data: one TOML file per preset in harmony_ref/model/specs/, each field beside the config.json key
it comes from, validated like a device profile (errors name the file, the field and the value).

    get_spec("llama-3.2-3b"); get_spec("my-model.toml"); list_specs()

A `ModelSpec` holds layers, hidden size, heads, KV heads, head dim, FFN size, vocab, positions,
tied embeddings and biases, and for a forward the norm epsilon, the activation, rope theta and
rope scaling (Llama 3's "llama3" stretch of long wavelengths). `spec.linears()` lists every weight
matrix under the layer names the Hugging Face checkpoints use (`model.layers.{i}.self_attn.q_proj`,
`model.layers.{i}.mlp.gate_proj`, `lm_head`; BERT's `encoder.layer.{i}.attention.self.query`,
...), so a quantization policy's layer patterns apply to them unchanged.

`param_count()` is computed from the shapes alone; tests/model/test_spec.py holds it within 1% of
the total each model card publishes (`published_params`, with its source in `source`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

from harmony_ref._schema import from_table
from harmony_ref._toml import read_toml, shipped_names

DECODER = "decoder"
ENCODER = "encoder"
# SwiGLU's SiLU (Llama, Qwen); BERT's exact-erf GELU; Gemma's GeGLU gate, tanh-approximated GELU
# (config.json hidden_act "gelu_pytorch_tanh"): an activation a phone NPU may not implement.
ACTIVATIONS = ("silu", "gelu", "gelu_tanh")
ROPE_SCALINGS = ("llama3",)
SPECS_FOLDER = "model/specs"
# The largest shape a spec (or a checkpoint's metadata) may state: 8x or more beyond the largest
# open models (Llama 3.1 405B: 126 layers, hidden 16,384, FFN 53,248, 128 heads; Gemma 3's
# 262,144-token vocabulary; Llama 4 Scout's 10M-token context), so a typo such as 10^8 layers is
# an error here instead of an op graph that takes hours to build.
SPEC_LIMITS = {
    "n_layers": 1024,
    "hidden": 131_072,
    "n_heads": 1024,
    "n_kv_heads": 1024,
    "head_dim": 2048,
    "intermediate": 524_288,
    "vocab": 2_097_152,
    "max_positions": 16_777_216,
}


@dataclass(frozen=True)
class Linear:
    """One weight matrix, stored (n_out, k_in) as a Linear layer holds it."""

    name: str
    n_out: int
    k_in: int
    bias: bool = False

    @property
    def params(self) -> int:
        return self.n_out * self.k_in + (self.n_out if self.bias else 0)


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3's rope scaling: wavelengths longer than original_max_positions / low_freq_factor
    are stretched by `factor`, shorter than ... / high_freq_factor kept, and blended between."""

    kind: str = field(metadata={"choices": ROPE_SCALINGS})  # rope_type
    factor: float = field(metadata={"min": 1.0})
    low_freq_factor: float = field(metadata={"min": 1e-9})
    high_freq_factor: float = field(metadata={"min": 1e-9})
    original_max_positions: int = field(metadata={"min": 1})  # original_max_position_embeddings


@dataclass(frozen=True)
class ModelSpec:
    name: str
    kind: str  # "decoder" (causal LM, SwiGLU + RMSNorm) or "encoder" (BERT, GELU + LayerNorm)
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_positions: int
    tie_embeddings: bool
    qkv_bias: bool = False
    type_vocab: int = 0  # BERT token-type embeddings
    published_params: int = 0
    source: str = ""  # where the numbers come from
    norm_eps: float = 1e-5  # RMSNorm (decoder) or LayerNorm (encoder) epsilon
    activation: str = "silu"  # of the feed-forward: "silu" (SwiGLU), "gelu", "gelu_tanh" (GeGLU)
    rope_theta: float = 0.0  # rope base frequency; 0 for models without rope (BERT)
    rope_scaling: RopeScaling | None = None
    # keys a local (sliding-window) layer's query sees, itself included (config.json
    # sliding_window; Gemma 3: 512); 0: every layer attends to the whole context
    sliding_window: int = field(default=0, metadata={"min": 0})
    # indices of the sliding-window layers (Gemma 3: all but every sixth; config.json layer_types)
    local_layers: tuple[int, ...] = ()
    file: str = field(default="<memory>", compare=False, init=False)  # the TOML it was read from

    def __post_init__(self):
        for f, limit in SPEC_LIMITS.items():
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(
                    f"model spec {self.name!r}: field '{f}' = {v!r}: must be a positive int"
                )
            if v > limit:
                raise ValueError(
                    f"model spec {self.name!r}: field '{f}' = {v:,}: at most {limit:,} "
                    "(8x beyond the largest open models; model/spec.py SPEC_LIMITS)"
                )
        if self.kind not in (DECODER, ENCODER):
            raise ValueError(
                f"model spec {self.name!r}: field 'kind' = {self.kind!r}: must be decoder or encoder"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"model spec {self.name!r}: n_heads = {self.n_heads} is not a multiple of "
                f"n_kv_heads = {self.n_kv_heads}"
            )
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"model spec {self.name!r}: field 'activation' = {self.activation!r}: "
                f"must be one of {list(ACTIVATIONS)}"
            )
        for f in ("norm_eps", "rope_theta"):
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(
                    f"model spec {self.name!r}: field '{f}' = {v!r}: must be a finite number"
                )
        if not self.norm_eps > 0:
            raise ValueError(
                f"model spec {self.name!r}: field 'norm_eps' = {self.norm_eps!r}: must be > 0"
            )
        if self.is_decoder and not self.rope_theta > 0:
            raise ValueError(
                f"model spec {self.name!r}: field 'rope_theta' = {self.rope_theta!r}: "
                "a decoder needs rope_theta > 0"
            )
        self._check_window()
        if not self.is_decoder and (self.rope_theta or self.rope_scaling is not None):
            raise ValueError(
                f"model spec {self.name!r}: an encoder has learned positions: "
                "no rope_theta or rope_scaling"
            )

    def _check_window(self) -> None:
        w, local = self.sliding_window, tuple(self.local_layers)
        if not isinstance(w, int) or isinstance(w, bool) or w < 0:
            raise ValueError(
                f"model spec {self.name!r}: field 'sliding_window' = {w!r}: must be an int >= 0"
            )
        bad = [i for i in local if not isinstance(i, int) or isinstance(i, bool)]
        bad += [i for i in local if isinstance(i, int) and not 0 <= i < self.n_layers]
        if bad:
            raise ValueError(
                f"model spec {self.name!r}: field 'local_layers' lists {bad[0]!r}: layer indices "
                f"are 0..{self.n_layers - 1}"
            )
        if len(set(local)) != len(local):
            raise ValueError(f"model spec {self.name!r}: field 'local_layers' lists a layer twice")
        if bool(w) != bool(local):
            raise ValueError(
                f"model spec {self.name!r}: sliding_window = {w} and local_layers = {list(local)}: "
                "a sliding window needs the layers it applies to, and those layers a window"
            )
        if local and not self.is_decoder:
            raise ValueError(f"model spec {self.name!r}: an encoder has no sliding-window layers")

    def is_local(self, layer: int) -> bool:
        """Whether block `layer` attends only to the last `sliding_window` positions."""
        return layer in self.local_layers

    def keys_seen(self, layer: int, rows: int, context: int) -> int:
        """Key positions block `layer` reads for `rows` new queries at the end of `context`
        positions: all of them on a global layer; on a local one the span the queries' windows
        cover, min(context, sliding_window + rows - 1) (a decode step: the window)."""
        if not self.is_local(layer):
            return context
        return min(context, self.sliding_window + rows - 1)

    def kv_positions(self, layer: int, context: int) -> int:
        """Positions block `layer`'s KV cache holds at `context` tokens: a local layer keeps a
        ring of the last `sliding_window` (kernels.KVCache(window=), what runtime/llama.py
        allocates); llama.cpp's SWA cache keeps the window plus one ubatch
        (llama-kv-cache-iswa.cpp, unless --swa-full)."""
        return min(context, self.sliding_window) if self.is_local(layer) else context

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def is_decoder(self) -> bool:
        """A causal decoder (RoPE, a KV cache); else an encoder (kind is one of the two)."""
        return self.kind != ENCODER

    @property
    def embed_name(self) -> str:
        return "model.embed_tokens" if self.is_decoder else "embeddings.word_embeddings"

    def layer_linears(self, i: int) -> list[Linear]:
        """The weight matrices of block i, in execution order."""
        h, q, kv, f = self.hidden, self.q_dim, self.kv_dim, self.intermediate
        if self.is_decoder:
            p = f"model.layers.{i}"
            return [
                Linear(f"{p}.self_attn.q_proj", q, h, self.qkv_bias),
                Linear(f"{p}.self_attn.k_proj", kv, h, self.qkv_bias),
                Linear(f"{p}.self_attn.v_proj", kv, h, self.qkv_bias),
                Linear(f"{p}.self_attn.o_proj", h, q),
                Linear(f"{p}.mlp.gate_proj", f, h),
                Linear(f"{p}.mlp.up_proj", f, h),
                Linear(f"{p}.mlp.down_proj", h, f),
            ]
        p = f"encoder.layer.{i}"
        return [
            Linear(f"{p}.attention.self.query", q, h, True),
            Linear(f"{p}.attention.self.key", kv, h, True),
            Linear(f"{p}.attention.self.value", kv, h, True),
            Linear(f"{p}.attention.output.dense", h, q, True),
            Linear(f"{p}.intermediate.dense", f, h, True),
            Linear(f"{p}.output.dense", h, f, True),
        ]

    def head_linear(self) -> Linear:
        """The output projection: lm_head for decoders (shares the embedding when tied), the
        pooler for BERT encoders."""
        if self.is_decoder:
            return Linear("lm_head", self.vocab, self.hidden)
        return Linear("pooler.dense", self.hidden, self.hidden, True)

    def weight_rows(self) -> list[tuple[str, int]]:
        """(name, row length K) of every weight a policy assigns a format: the embedding table
        and every matmul weight (what quant/policy.py check_applies matches patterns against)."""
        return [(self.embed_name, self.hidden)] + [(lin.name, lin.k_in) for lin in self.linears()]

    def linears(self) -> list[Linear]:
        """Every matmul weight, layers then head (the tied lm_head included: it is what decode
        multiplies by, whichever tensor it is stored in)."""
        out = [lin for i in range(self.n_layers) for lin in self.layer_linears(i)]
        out.append(self.head_linear())
        return out

    def norm_params_per_layer(self) -> int:
        # RMSNorm has a weight only; LayerNorm a weight and a bias. Two norms per block.
        return 2 * self.hidden if self.is_decoder else 4 * self.hidden

    def embedding_params(self) -> int:
        n = self.vocab * self.hidden
        if not self.is_decoder:
            n += (self.max_positions + self.type_vocab) * self.hidden + 2 * self.hidden  # + LN
        return n

    def param_count(self) -> int:
        """Total parameters computed from the shapes (a tied lm_head counted once)."""
        n = self.embedding_params()
        n += sum(lin.params for i in range(self.n_layers) for lin in self.layer_linears(i))
        n += self.n_layers * self.norm_params_per_layer()
        if self.is_decoder:
            n += self.hidden  # final norm
            if not self.tie_embeddings:
                n += self.head_linear().params
        else:
            n += self.head_linear().params
        return n


# What a spec file must state even where the dataclass has a default (a forward reads them).
REQUIRED_IN_FILES = {
    DECODER: ("norm_eps", "activation", "rope_theta"),
    ENCODER: ("norm_eps", "activation"),
}


def spec_from_dict(data: dict, source: str) -> ModelSpec:
    """Validate a parsed spec table; every error names `source`, the field and its value."""
    kind = data.get("kind")
    missing = [k for k in REQUIRED_IN_FILES.get(kind, ()) if k not in data]
    if missing:
        raise ValueError(f"{source}: missing field '{missing[0]}' (a {kind} spec states it)")
    try:
        spec = from_table(ModelSpec, data, source)
    except ValueError as e:
        # Cross-field checks (ModelSpec.__post_init__) do not know the file; add it.
        raise e if str(e).startswith(source) else ValueError(f"{source}: {e}") from e
    object.__setattr__(spec, "file", source)
    return spec


def list_specs() -> list[str]:
    """Names of the presets shipped in harmony_ref/model/specs/."""
    return shipped_names(SPECS_FOLDER)


@functools.cache
def _shipped(name: str) -> ModelSpec:
    data, source = read_toml("model spec", SPECS_FOLDER, name)
    spec = spec_from_dict(data, source)
    if spec.name != name:
        raise ValueError(
            f"{source}: field 'name' = {spec.name!r}: must be the file's name {name!r}"
        )
    return spec


def get_spec(name: str | Path | ModelSpec) -> ModelSpec:
    """A preset by name (case-insensitive) or a spec TOML by path; a ModelSpec passes through."""
    if isinstance(name, ModelSpec):
        return name
    text = str(name)
    if text.endswith(".toml") or Path(text).exists():
        return spec_from_dict(*read_toml("model spec", SPECS_FOLDER, text))
    key = text.strip().lower()
    if key not in list_specs():
        from harmony_ref._format import did_you_mean

        raise ValueError(
            f"unknown model {name!r}{did_you_mean(name, list_specs())}; known "
            f"models: {list_specs()}"
        )
    return _shipped(key)
