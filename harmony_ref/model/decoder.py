"""The in-memory decoder model that every checkpoint reader produces: a frozen spec read from the
checkpoint's own metadata (no preset) and FP32 weights in one layout.

Architectures: llama (Llama, SmolLM2), qwen2 (q/k/v biases), qwen3 (RMSNorm on each q and k head
before RoPE), gemma3 (Gemma 3: embedding scaled by sqrt(dim), q/k head norms, an RMSNorm on each
sublayer's output before the residual add, GELU-tanh gate, sliding-window attention on the local
layers with their own RoPE base). One norm convention in memory: y = x / rms(x) * weight, so
Hugging Face Gemma's (1 + weight) is stored as the sum (as convert_hf_to_gguf.py stores it).

    DecoderConfig   n_layers, dim, n_heads, n_kv_heads, head_dim, ffn_dim, vocab_size, ...
    DecoderWeights  embed (V, D), layers[i]: LayerWeights, final_norm (D,), lm_head (V, D) or None

One RoPE convention in memory: Hugging Face's rotate-half. Within a head of `head_dim` values,
channel j < head_dim / 2 is rotated with channel j + head_dim / 2 by angle pos * theta^(-2j / hd).
GGUF llama files store Q/K rows permuted for the adjacent-pair form (llama.cpp's
convert_hf_to_gguf.py `permute`); harmony_ref.checkpoint.gguf undoes that on load.

Linear weights are (out, in) as in nn.Linear, so y = x @ W.T. Layer names (what a quantization
policy matches) are Hugging Face's: `model.layers.{i}.self_attn.q_proj`, `...mlp.gate_proj`,
`lm_head`. `validate_weights` checks every shape against the config and every value for NaN/Inf
once, at load, so the forward passes never check again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from harmony_ref.quant.policy import Policy

# SwiGLU: down(silu(gate(x)) * up(x)); GeGLU (Gemma): down(gelu_tanh(gate(x)) * up(x))
ACTIVATIONS = ("silu", "gelu_tanh")
ARCHITECTURES = ("llama", "qwen2", "qwen3", "gemma3")
LINEAR_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: the message names the file and the tensor or field."""


@dataclass(frozen=True)
class DecoderConfig:
    arch: str  # "llama" | "qwen2" | "qwen3" | "gemma3"
    n_layers: int
    dim: int  # hidden size D
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int  # F
    vocab_size: int  # V
    rope_theta: float
    norm_eps: float
    activation: str = "silu"
    tied_embeddings: bool = False
    max_positions: int = 2048
    attention_bias: bool = False  # q/k/v biases (Qwen2)
    bos_id: int | None = None
    eos_id: int | None = None
    chat_template: str | None = field(default=None, repr=False)
    name: str = ""
    qk_norm: bool = False  # RMSNorm over each q and k head before RoPE (Qwen3, Gemma 3)
    post_norms: bool = False  # RMSNorm on the attention and FFN outputs before the add (Gemma 3)
    embed_scale: float = 1.0  # x = embed[tokens] * embed_scale (Gemma: sqrt(dim))
    attn_scale: float = 0.0  # scores = q k^T * attn_scale; 0 means 1 / sqrt(head_dim)
    sliding_window: int = 0  # keys a local layer's query sees, itself included; 0: no local layers
    local_layers: tuple = ()  # indices of the sliding-window layers
    rope_theta_local: float = 0.0  # RoPE base of the local layers; 0 means rope_theta

    def __post_init__(self):
        ints = (
            "n_layers",
            "dim",
            "n_heads",
            "n_kv_heads",
            "head_dim",
            "ffn_dim",
            "vocab_size",
            "max_positions",
        )
        for key in ints:
            v = getattr(self, key)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v <= 0:
                raise CheckpointError(f"config field {key} must be a positive integer, got {v!r}")
        if self.arch not in ARCHITECTURES:
            raise CheckpointError(f"unknown architecture {self.arch!r}; supported: {ARCHITECTURES}")
        if self.activation not in ACTIVATIONS:
            raise CheckpointError(
                f"unknown activation {self.activation!r}; supported: {ACTIVATIONS}"
            )
        if self.n_heads % self.n_kv_heads:
            raise CheckpointError(
                f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}"
            )
        if self.head_dim % 2:
            raise CheckpointError(f"head_dim must be even for RoPE, got {self.head_dim}")
        for key in ("rope_theta", "norm_eps", "embed_scale"):
            v = getattr(self, key)
            if not (np.isfinite(v) and v > 0):
                raise CheckpointError(f"config field {key} must be a positive number, got {v!r}")
        for key in ("attn_scale", "rope_theta_local"):
            v = getattr(self, key)
            if not (np.isfinite(v) and v >= 0):
                raise CheckpointError(f"config field {key} must be a number >= 0, got {v!r}")
        if (
            not isinstance(self.sliding_window, (int, np.integer))
            or isinstance(self.sliding_window, bool)
            or self.sliding_window < 0
        ):
            raise CheckpointError(
                f"config field sliding_window must be an integer >= 0, got {self.sliding_window!r}"
            )
        bad = [i for i in self.local_layers if not 0 <= int(i) < self.n_layers]
        if bad or (self.local_layers and not self.sliding_window):
            raise CheckpointError(
                f"config field local_layers = {list(self.local_layers)}: needs "
                f"sliding_window > 0 and layers in 0..{self.n_layers - 1}"
            )

    def is_local(self, layer: int) -> bool:
        """Whether `layer` attends only to the last `sliding_window` positions."""
        return layer in self.local_layers

    def layer_rope_theta(self, layer: int) -> float:
        if self.is_local(layer) and self.rope_theta_local:
            return self.rope_theta_local
        return self.rope_theta

    @property
    def query_scale(self) -> float:
        return self.attn_scale or 1.0 / float(np.sqrt(self.head_dim))

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "chat_template"}
        d["local_layers"] = [int(i) for i in self.local_layers]
        d["has_chat_template"] = self.chat_template is not None
        return d

    def to_spec(self, name: str | None = None, source: str = ""):
        """The ModelSpec (model/spec.py) of this checkpoint's shapes, so the op graph, the cost
        model and the memory model predict the real model: same layers, widths, heads, vocab,
        positions, tied head and biases."""
        from harmony_ref.model.spec import DECODER, ModelSpec

        return ModelSpec(
            name=name or self.name or self.arch,
            kind=DECODER,
            n_layers=int(self.n_layers),
            hidden=int(self.dim),
            n_heads=int(self.n_heads),
            n_kv_heads=int(self.n_kv_heads),
            head_dim=int(self.head_dim),
            intermediate=int(self.ffn_dim),
            vocab=int(self.vocab_size),
            max_positions=int(self.max_positions),
            tie_embeddings=bool(self.tied_embeddings),
            qkv_bias=bool(self.attention_bias),
            published_params=int(self.n_params()),
            source=source or "derived from the checkpoint's own metadata",
            norm_eps=float(self.norm_eps),
            activation=self.activation,
            rope_theta=float(self.rope_theta),
            # a window no layer uses (a pattern of global layers only) changes nothing
            sliding_window=int(self.sliding_window) if self.local_layers else 0,
            local_layers=tuple(int(i) for i in self.local_layers),
        )

    def n_params(self) -> int:
        d, f = self.dim, self.ffn_dim
        per_layer = d * (self.q_dim + 2 * self.kv_dim) + self.q_dim * d + 3 * d * f + 2 * d
        per_layer += 2 * self.head_dim * self.qk_norm + 2 * d * self.post_norms
        if self.attention_bias:
            per_layer += self.q_dim + 2 * self.kv_dim
        head = 0 if self.tied_embeddings else self.vocab_size * d
        return self.vocab_size * d + self.n_layers * per_layer + d + head


# LayerWeights fields present only when the config says so (the DecoderConfig flag that does)
OPTIONAL_TENSORS = {
    "bq": "attention_bias",
    "bk": "attention_bias",
    "bv": "attention_bias",
    "q_norm": "qk_norm",
    "k_norm": "qk_norm",
    "post_attn_norm": "post_norms",
    "post_ffn_norm": "post_norms",
}


@dataclass
class LayerWeights:
    attn_norm: np.ndarray  # (D,)
    wq: np.ndarray  # (H * hd, D)
    wk: np.ndarray  # (Hkv * hd, D)
    wv: np.ndarray  # (Hkv * hd, D)
    wo: np.ndarray  # (D, H * hd)
    ffn_norm: np.ndarray  # (D,)
    w_gate: np.ndarray  # (F, D)
    w_up: np.ndarray  # (F, D)
    w_down: np.ndarray  # (D, F)
    bq: np.ndarray | None = None  # (H * hd,)   attention_bias only
    bk: np.ndarray | None = None  # (Hkv * hd,)
    bv: np.ndarray | None = None  # (Hkv * hd,)
    q_norm: np.ndarray | None = None  # (hd,)   qk_norm only
    k_norm: np.ndarray | None = None  # (hd,)
    post_attn_norm: np.ndarray | None = None  # (D,)   post_norms only
    post_ffn_norm: np.ndarray | None = None  # (D,)

    def dims(self, head_dim: int) -> tuple[int, int, int]:
        """(query heads, KV heads, FFN width) of this block, read from its matrices: a pruned
        block (model/prune.py) is narrower than the config."""
        return self.wq.shape[0] // head_dim, self.wk.shape[0] // head_dim, self.w_gate.shape[0]

    def linears(self) -> dict[str, np.ndarray]:
        """HF short name -> weight, in forward order."""
        return {
            "q_proj": self.wq,
            "k_proj": self.wk,
            "v_proj": self.wv,
            "o_proj": self.wo,
            "gate_proj": self.w_gate,
            "up_proj": self.w_up,
            "down_proj": self.w_down,
        }


@dataclass
class DecoderWeights:
    config: DecoderConfig
    embed: np.ndarray  # (V, D)
    layers: list[LayerWeights]
    final_norm: np.ndarray  # (D,)
    lm_head: np.ndarray | None  # (V, D); None when tied to `embed`
    source: str = ""  # file or directory it was read from
    stored_formats: dict[str, str] = field(default_factory=dict)  # tensor -> format in the file
    # Linear name (layer_name, "lm_head") -> the matrix as the file stores it (a GGMLTensor, or a
    # float16/float32 array), rows in the in-memory order; filled only on request
    # (read_gguf(keep_stored=True)), for the `as-stored` policy. After compress/, the tensors
    # GPTQ fitted instead (Int4Tensor / Int8Tensor)
    stored: dict = field(default_factory=dict)
    # Set by compress/ only: Linear name -> (K,) float32 static W8A8 activation scale, and the
    # policy (quant/policy.py Policy) these weights were compressed for (Llama refuses another)
    act_scales: dict = field(default_factory=dict)
    compressed_for: Policy | None = None

    @property
    def head(self) -> np.ndarray:
        return self.embed if self.lm_head is None else self.lm_head


def layer_name(i: int, short: str) -> str:
    """Dotted HF name of a Linear, the name a policy matches."""
    kind = "mlp" if short in ("gate_proj", "up_proj", "down_proj") else "self_attn"
    return f"model.layers.{i}.{kind}.{short}"


def expected_shapes(c: DecoderConfig) -> dict[str, tuple[int, ...]]:
    """LayerWeights field -> shape."""
    shapes = {
        "attn_norm": (c.dim,),
        "wq": (c.q_dim, c.dim),
        "wk": (c.kv_dim, c.dim),
        "wv": (c.kv_dim, c.dim),
        "wo": (c.dim, c.q_dim),
        "ffn_norm": (c.dim,),
        "w_gate": (c.ffn_dim, c.dim),
        "w_up": (c.ffn_dim, c.dim),
        "w_down": (c.dim, c.ffn_dim),
    }
    if c.attention_bias:
        shapes.update(bq=(c.q_dim,), bk=(c.kv_dim,), bv=(c.kv_dim,))
    if c.qk_norm:
        shapes.update(q_norm=(c.head_dim,), k_norm=(c.head_dim,))
    if c.post_norms:
        shapes.update(post_attn_norm=(c.dim,), post_ffn_norm=(c.dim,))
    return shapes


def check_tensor(a: np.ndarray, shape: tuple[int, ...], where: str) -> np.ndarray:
    """`a` as C-contiguous float32 of `shape`, all finite, else CheckpointError naming `where`."""
    if tuple(a.shape) != tuple(shape):
        raise CheckpointError(
            f"{where}: shape {tuple(a.shape)} does not match the config's {tuple(shape)}"
        )
    a = np.ascontiguousarray(a, dtype=np.float32)
    finite = np.isfinite(a)
    if not finite.all():
        idx = tuple(int(i) for i in np.argwhere(~finite)[0])
        raise CheckpointError(
            f"{where}: value {a[idx]} at {list(idx)} is not finite "
            f"({int((~finite).sum())} non-finite values)"
        )
    return a


def validate_weights(w: DecoderWeights, tensor_name=None) -> None:
    """Every shape against the config, every value finite. Errors (CheckpointError) name
    `w.source` and the tensor: `tensor_name(key)` maps an in-memory key ("embed", "lm_head",
    "final_norm", "layer 3 wq") to the file's own tensor name (default: the key)."""
    c = w.config
    src = w.source or "<memory>"
    name = tensor_name or (lambda key: key)

    def check(a, shape, key):
        return check_tensor(a, shape, f"{src}: tensor {name(key)}")

    w.embed = check(w.embed, (c.vocab_size, c.dim), "embed")
    w.final_norm = check(w.final_norm, (c.dim,), "final_norm")
    if w.lm_head is not None:
        w.lm_head = check(w.lm_head, (c.vocab_size, c.dim), "lm_head")
    elif not c.tied_embeddings:
        raise CheckpointError(f"{src}: no output head and the config does not tie embeddings")
    if len(w.layers) != c.n_layers:
        raise CheckpointError(f"{src}: {len(w.layers)} layers, config says {c.n_layers}")
    shapes = expected_shapes(c)
    for i, layer in enumerate(w.layers):
        for key, shape in shapes.items():
            a = getattr(layer, key)
            if a is None:
                raise CheckpointError(f"{src}: tensor {name(f'layer {i} {key}')} is missing")
            setattr(layer, key, check(a, shape, f"layer {i} {key}"))
