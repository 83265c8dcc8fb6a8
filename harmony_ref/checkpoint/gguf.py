"""GGUF checkpoints (llama.cpp's format) read with the `gguf` package, llama.cpp's own Python
library: every tensor dequantized into FP32 by gguf's dequantizers (F32, F16, BF16, Q8_0, Q4_0,
Q4_1, Q5_0/1 and the K-quants it implements), and the model spec derived from the file's metadata.

    weights = read_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")   # -> DecoderWeights (FP32)
    meta = gguf_metadata(path)                              # -> dict of the scalar/str fields

Architectures: "llama" and "qwen2". llama's Q/K rows were permuted by convert_hf_to_gguf.py for
llama.cpp's adjacent-pair RoPE (`permute`: rows of a head ordered (pair, half) -> (half, pair));
we invert it so the in-memory weights use rotate-half like Hugging Face's (model/decoder.py).
qwen2 files are converted without that permutation and read as they are.

Tensor names (GGUF -> in-memory): token_embd -> embed, output_norm -> final_norm, output -> lm_head
(absent: tied embeddings), blk.{i}.attn_norm / attn_q / attn_k / attn_v / attn_output / ffn_norm /
ffn_gate / ffn_up / ffn_down (+ attn_q/k/v.bias). Every failure is a CheckpointError naming the
file and the tensor or metadata key: truncated file, unknown architecture, missing tensor, shape
mismatch, NaN/Inf weights, unsupported quantization type or RoPE scaling.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harmony_ref.model.decoder import (
    ARCHITECTURES,
    CheckpointError,
    DecoderConfig,
    DecoderWeights,
    LayerWeights,
    validate_weights,
)

# in-memory LayerWeights field -> GGUF tensor name inside blk.{i}
LAYER_TENSORS = {
    "attn_norm": "attn_norm.weight", "wq": "attn_q.weight", "wk": "attn_k.weight",
    "wv": "attn_v.weight", "wo": "attn_output.weight", "ffn_norm": "ffn_norm.weight",
    "w_gate": "ffn_gate.weight", "w_up": "ffn_up.weight", "w_down": "ffn_down.weight",
    "bq": "attn_q.bias", "bk": "attn_k.bias", "bv": "attn_v.bias",
}
PERMUTED_ARCHS = ("llama",)  # Q/K stored for adjacent-pair RoPE


def _open(path: Path):
    import gguf

    if not path.is_file():
        raise CheckpointError(f"{path}: no such GGUF file")
    try:
        return gguf.GGUFReader(str(path))
    except Exception as e:  # the reader raises ValueError, struct/IndexError on garbage
        raise CheckpointError(f"{path}: not a readable GGUF file (truncated or corrupt?): "
                              f"{type(e).__name__}: {e}") from e


def _field(reader, key: str):
    f = reader.fields.get(key)
    if f is None:
        return None
    v = f.contents()
    return v


def gguf_metadata(path) -> dict:
    """Every metadata field except the big tokenizer arrays, as Python values."""
    reader = _open(Path(path))
    big = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
           "tokenizer.ggml.scores")
    return {k: _field(reader, k) for k in reader.fields if k not in big and not k.startswith("GGUF.")}


def config_from_metadata(reader, path: Path, tensor_shapes: dict) -> DecoderConfig:
    """The spec from the file's own metadata keys ({arch}.block_count, ...)."""
    arch = _field(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise CheckpointError(f"{path}: general.architecture = {arch!r} is not supported "
                              f"(supported: {', '.join(ARCHITECTURES)})")

    def need(key):
        v = _field(reader, f"{arch}.{key}")
        if v is None:
            raise CheckpointError(f"{path}: metadata key {arch}.{key} is missing")
        return v

    def opt(key, default):
        v = _field(reader, f"{arch}.{key}")
        return default if v is None else v

    scaling = opt("rope.scaling.type", "none")
    if scaling not in ("none", None):
        raise CheckpointError(f"{path}: {arch}.rope.scaling.type = {scaling!r} is not supported")
    dim = int(need("embedding_length"))
    n_heads = int(need("attention.head_count"))
    head_dim = int(opt("attention.key_length", dim // n_heads))
    rope_dims = int(opt("rope.dimension_count", head_dim))
    if rope_dims != head_dim:
        raise CheckpointError(f"{path}: {arch}.rope.dimension_count = {rope_dims} != head dim "
                              f"{head_dim} (partial rotary embeddings are not supported)")
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    embed_rows = tensor_shapes.get("token_embd.weight", (None,))[0]
    vocab = opt("vocab_size", len(tokens.data) if tokens is not None else embed_rows)
    bos, eos = _field(reader, "tokenizer.ggml.bos_token_id"), _field(reader, "tokenizer.ggml.eos_token_id")
    return DecoderConfig(
        arch=arch,
        n_layers=int(need("block_count")),
        dim=dim,
        n_heads=n_heads,
        n_kv_heads=int(opt("attention.head_count_kv", n_heads)),
        head_dim=head_dim,
        ffn_dim=int(need("feed_forward_length")),
        vocab_size=int(vocab),
        rope_theta=float(opt("rope.freq_base", 10000.0)),
        norm_eps=float(need("attention.layer_norm_rms_epsilon")),
        activation="silu",
        tied_embeddings="output.weight" not in tensor_shapes,
        max_positions=int(opt("context_length", 2048)),
        attention_bias="blk.0.attn_q.bias" in tensor_shapes,
        bos_id=None if bos is None else int(bos),
        eos_id=None if eos is None else int(eos),
        chat_template=_field(reader, "tokenizer.chat_template"),
        name=str(_field(reader, "general.name") or path.stem),
    )


def unpermute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo convert_hf_to_gguf.py's `permute` on Q or K rows (a weight (H*hd, D) or bias (H*hd,)):
    GGUF row order within a head is (pair j, half h) -> HF's (half h, pair j)."""
    rest = w.shape[1:]
    hd = w.shape[0] // n_heads
    return (w.reshape(n_heads, hd // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape))


def permute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """convert_hf_to_gguf.py's `permute` (HF rotate-half rows -> GGUF adjacent pairs)."""
    rest = w.shape[1:]
    hd = w.shape[0] // n_heads
    return (w.reshape(n_heads, 2, hd // 2, *rest).swapaxes(1, 2).reshape(w.shape))


def _dequantize(t, path: Path) -> np.ndarray:
    import gguf

    shape = tuple(int(d) for d in reversed(t.shape.tolist()))
    block, type_size = gguf.GGML_QUANT_SIZES[t.tensor_type]
    if t.data.nbytes != t.n_elements * type_size // block:
        raise CheckpointError(f"{path}: tensor {t.name} has {t.data.nbytes} bytes, its "
                              f"{t.tensor_type.name} shape {shape} needs "
                              f"{t.n_elements * type_size // block} (truncated file?)")
    try:
        a = gguf.quants.dequantize(t.data, t.tensor_type)
    except NotImplementedError as e:
        raise CheckpointError(f"{path}: tensor {t.name} is {t.tensor_type.name}, which gguf "
                              f"cannot dequantize") from e
    return np.asarray(a, dtype=np.float32).reshape(shape)


def read_gguf_config(path) -> DecoderConfig:
    """The model's config from the metadata alone (no tensor is dequantized)."""
    path = Path(path)
    reader = _open(path)
    shapes = {t.name: tuple(int(d) for d in reversed(t.shape.tolist())) for t in reader.tensors}
    return config_from_metadata(reader, path, shapes)


def read_gguf(path) -> DecoderWeights:
    """All tensors of a llama/qwen2 GGUF file as FP32 DecoderWeights, validated."""
    path = Path(path)
    reader = _open(path)
    tensors = {t.name: t for t in reader.tensors}
    shapes = {name: tuple(int(d) for d in reversed(t.shape.tolist())) for name, t in tensors.items()}
    config = config_from_metadata(reader, path, shapes)
    stored: dict[str, str] = {}

    def get(name: str, required: bool = True):
        t = tensors.get(name)
        if t is None:
            if required:
                raise CheckpointError(f"{path}: tensor {name} is missing")
            return None
        stored[name] = t.tensor_type.name
        return _dequantize(t, path)

    permuted = config.arch in PERMUTED_ARCHS
    layers = []
    for i in range(config.n_layers):
        fields = {}
        for key, suffix in LAYER_TENSORS.items():
            is_bias = key.startswith("b")
            a = get(f"blk.{i}.{suffix}", required=not is_bias or config.attention_bias)
            if a is not None and permuted and key in ("wq", "bq"):
                a = _unpermute_checked(a, config.n_heads, path, f"blk.{i}.{suffix}")
            if a is not None and permuted and key in ("wk", "bk"):
                a = _unpermute_checked(a, config.n_kv_heads, path, f"blk.{i}.{suffix}")
            fields[key] = a
        layers.append(LayerWeights(**fields))
    weights = DecoderWeights(
        config=config,
        embed=get("token_embd.weight"),
        layers=layers,
        final_norm=get("output_norm.weight"),
        lm_head=get("output.weight", required=False),
        source=str(path),
        stored_formats=stored,
    )
    validate_weights(weights, _gguf_name)
    return weights


def _unpermute_checked(a, n_heads, path, name):
    if a.shape[0] % (2 * n_heads):
        raise CheckpointError(f"{path}: tensor {name} has shape {a.shape}: rows not a multiple "
                              f"of 2 x {n_heads} heads")
    return unpermute_rope_rows(a, n_heads)


def _gguf_name(key: str) -> str:
    """In-memory key ("layer 3 wq", "embed") -> the GGUF tensor name, for error messages."""
    parts = key.split()
    if parts[0] == "layer":
        return f"blk.{parts[1]}.{LAYER_TENSORS[parts[2]]}"
    return {"embed": "token_embd.weight", "final_norm": "output_norm.weight",
            "lm_head": "output.weight"}[parts[0]]


# ----------------------------------------------------------------------------------------------
# Writing (tests and tools): FP32 weights -> a GGUF file llama.cpp can read


def write_gguf(weights: DecoderWeights, path, *, tokens=None, token_types=None, merges=None,
               pre: str = "smollm", qtype: str = "F32") -> None:
    """Write `weights` as a llama/qwen2 GGUF (Q/K permuted back for llama), F32 or F16 tensors."""
    import gguf

    c = weights.config
    w = gguf.GGUFWriter(str(path), c.arch)
    w.add_name(c.name or "harmony-ref")
    w.add_block_count(c.n_layers)
    w.add_context_length(c.max_positions)
    w.add_embedding_length(c.dim)
    w.add_feed_forward_length(c.ffn_dim)
    w.add_head_count(c.n_heads)
    w.add_head_count_kv(c.n_kv_heads)
    w.add_rope_freq_base(c.rope_theta)
    w.add_layer_norm_rms_eps(c.norm_eps)
    w.add_vocab_size(c.vocab_size)
    w.add_rope_dimension_count(c.head_dim)
    if c.head_dim != c.dim // c.n_heads:
        w.add_key_length(c.head_dim)
        w.add_value_length(c.head_dim)
    if tokens is not None:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types(token_types if token_types is not None else [1] * len(tokens))
        if merges is not None:
            w.add_token_merges(merges)
        w.add_add_bos_token(False)
    if c.bos_id is not None:
        w.add_bos_token_id(c.bos_id)
    if c.eos_id is not None:
        w.add_eos_token_id(c.eos_id)
    if c.chat_template:
        w.add_chat_template(c.chat_template)
    dtype = {"F32": np.float32, "F16": np.float16}[qtype]
    permuted = c.arch in PERMUTED_ARCHS

    def put(name, a, vector=False):
        a = np.ascontiguousarray(a, dtype=np.float32 if vector else dtype)
        w.add_tensor(name, a)

    put("token_embd.weight", weights.embed)
    for i, layer in enumerate(weights.layers):
        for key, suffix in LAYER_TENSORS.items():
            a = getattr(layer, key)
            if a is None:
                continue
            if permuted and key in ("wq", "bq"):
                a = permute_rope_rows(a, c.n_heads)
            if permuted and key in ("wk", "bk"):
                a = permute_rope_rows(a, c.n_kv_heads)
            put(f"blk.{i}.{suffix}", a, vector=a.ndim == 1)
    put("output_norm.weight", weights.final_norm, vector=True)
    if weights.lm_head is not None:
        put("output.weight", weights.lm_head)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
