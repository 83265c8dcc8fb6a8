"""Model specs: the shapes of real open models, taken from their published `config.json` files.

A `ModelSpec` is pure shape data (layers, hidden size, heads, KV heads, head dim, FFN size, vocab,
tied embeddings, biases). `spec.linears()` lists every weight matrix under the layer names the
Hugging Face checkpoints use (`model.layers.{i}.self_attn.q_proj`, `model.layers.{i}.mlp.gate_proj`,
`lm_head`; BERT's `encoder.layer.{i}.attention.self.query`, ...), so a quantization policy's layer
patterns apply to them unchanged.

`param_count()` is computed from the shapes alone; tests/test_spec.py holds it within 1% of the
total each model card publishes (`published_params`, with its source in `source`).

    get_spec("llama-3.2-3b"); list_specs()
"""

from __future__ import annotations

from dataclasses import dataclass

DECODER = "decoder"
ENCODER = "encoder"


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
    source: str = ""

    def __post_init__(self):
        for f in ("n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "intermediate", "vocab"):
            v = getattr(self, f)
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"model spec {self.name!r}: field '{f}' = {v!r}: must be a positive int")
        if self.kind not in (DECODER, ENCODER):
            raise ValueError(f"model spec {self.name!r}: field 'kind' = {self.kind!r}: must be decoder or encoder")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"model spec {self.name!r}: n_heads = {self.n_heads} is not a multiple of "
                f"n_kv_heads = {self.n_kv_heads}"
            )

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def is_decoder(self) -> bool:
        return self.kind == DECODER

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


# Shapes from each model's config.json on its model card; published totals from the same card.
_SPECS = {
    s.name: s
    for s in [
        ModelSpec(
            "qwen2.5-0.5b", DECODER, n_layers=24, hidden=896, n_heads=14, n_kv_heads=2, head_dim=64,
            intermediate=4864, vocab=151936, max_positions=32768, tie_embeddings=True, qkv_bias=True,
            published_params=490_000_000,
            source="huggingface.co/Qwen/Qwen2.5-0.5B config.json; card: 'Number of Parameters: 0.49B'",
        ),
        ModelSpec(
            "qwen2.5-1.5b", DECODER, n_layers=28, hidden=1536, n_heads=12, n_kv_heads=2, head_dim=128,
            intermediate=8960, vocab=151936, max_positions=131072, tie_embeddings=True, qkv_bias=True,
            published_params=1_540_000_000,
            source="huggingface.co/Qwen/Qwen2.5-1.5B config.json; card: 'Number of Parameters: 1.54B'",
        ),
        ModelSpec(
            "qwen2.5-7b", DECODER, n_layers=28, hidden=3584, n_heads=28, n_kv_heads=4, head_dim=128,
            intermediate=18944, vocab=152064, max_positions=131072, tie_embeddings=False, qkv_bias=True,
            published_params=7_610_000_000,
            source="huggingface.co/Qwen/Qwen2.5-7B config.json; card: 'Number of Parameters: 7.61B'",
        ),
        ModelSpec(
            "llama-3.2-1b", DECODER, n_layers=16, hidden=2048, n_heads=32, n_kv_heads=8, head_dim=64,
            intermediate=8192, vocab=128256, max_positions=131072, tie_embeddings=True,
            published_params=1_235_814_400,
            source="huggingface.co/meta-llama/Llama-3.2-1B config.json; safetensors total 1,235,814,400 (card: 1.23B)",
        ),
        ModelSpec(
            "llama-3.2-3b", DECODER, n_layers=28, hidden=3072, n_heads=24, n_kv_heads=8, head_dim=128,
            intermediate=8192, vocab=128256, max_positions=131072, tie_embeddings=True,
            published_params=3_212_749_824,
            source="huggingface.co/meta-llama/Llama-3.2-3B config.json; safetensors total 3,212,749,824 (card: 3.21B)",
        ),
        ModelSpec(
            "llama-2-7b", DECODER, n_layers=32, hidden=4096, n_heads=32, n_kv_heads=32, head_dim=128,
            intermediate=11008, vocab=32000, max_positions=4096, tie_embeddings=False,
            published_params=6_738_415_616,
            source="huggingface.co/meta-llama/Llama-2-7b-hf config.json; safetensors total 6,738,415,616 (card: 7B)",
        ),
        ModelSpec(
            "all-minilm-l6", ENCODER, n_layers=6, hidden=384, n_heads=12, n_kv_heads=12, head_dim=32,
            intermediate=1536, vocab=30522, max_positions=512, tie_embeddings=False, type_vocab=2,
            published_params=22_700_000,
            source="huggingface.co/sentence-transformers/all-MiniLM-L6-v2 config.json; card: 22.7M params",
        ),
    ]
}


def list_specs() -> list[str]:
    return sorted(_SPECS)


def get_spec(name: str | ModelSpec) -> ModelSpec:
    """A preset by name (case-insensitive); a ModelSpec passes through."""
    if isinstance(name, ModelSpec):
        return name
    spec = _SPECS.get(str(name).strip().lower())
    if spec is None:
        raise ValueError(f"unknown model {name!r}; known models: {list_specs()}")
    return spec
