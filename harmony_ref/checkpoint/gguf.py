"""GGUF checkpoints (llama.cpp's format) read with the `gguf` package, llama.cpp's own Python
library: every tensor dequantized into FP32 by gguf's dequantizers (F32, F16, BF16, Q8_0, Q4_0,
Q4_1, Q5_0/1 and the K-quants it implements), and the model spec derived from the file's metadata.

    weights = read_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")   # -> DecoderWeights (FP32)
    meta = gguf_metadata(path)                              # -> dict of the scalar/str fields

Architectures: "llama", "qwen2", "qwen3" and "gemma3". llama's Q/K rows were permuted by
convert_hf_to_gguf.py for llama.cpp's adjacent-pair RoPE (`permute`: rows of a head ordered
(pair, half) -> (half, pair)); we invert it so the in-memory weights use rotate-half like Hugging
Face's (model/decoder.py). qwen2, qwen3 and gemma3 files use rotate-half (llama.cpp's NEOX RoPE)
and are read as they are.

gemma3 as llama.cpp's src/models/gemma3.cpp reads it: `gemma3.attention.sliding_window` (0 or
absent: every layer global); the local layers from `gemma3.attention.sliding_window_pattern` (an
int n: layer i is local unless i % n == n - 1; a bool array: per layer; absent: n = 6); the local
RoPE base `gemma3.rope.freq_base_swa` (absent: 10000, llama.cpp's default); the query scale
1 / sqrt(key_length) (1 / sqrt(dim / heads) for the 62-layer 27B, llama.cpp's rule); the
embedding scaled by sqrt(dim); norm weights stored with Gemma's + 1 already added.
`gemma3.final_logit_softcapping` other than 0 is refused (no Gemma 3 uses it).

Tensor names (GGUF -> in-memory): token_embd -> embed, output_norm -> final_norm, output -> lm_head
(absent: tied embeddings), blk.{i}.attn_norm / attn_q / attn_k / attn_v / attn_output / ffn_norm /
ffn_gate / ffn_up / ffn_down (+ attn_q/k/v.bias; attn_q_norm / attn_k_norm; post_attention_norm /
post_ffw_norm). The file is parsed once per process (`open_reader`: gguf's reader takes seconds
over a 262,144-token vocabulary) for the config, the weights and the tokenizer. Every failure is a CheckpointError naming the
file and the tensor or metadata key: truncated file, unknown architecture, missing tensor, shape
mismatch, NaN/Inf weights, unsupported quantization type or RoPE scaling.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harmony_ref.model.decoder import (
    ARCHITECTURES,
    OPTIONAL_TENSORS,
    CheckpointError,
    DecoderConfig,
    DecoderWeights,
    LayerWeights,
    validate_weights,
)
from harmony_ref.quant.formats import BY_GGUF_TYPE

# in-memory LayerWeights field -> GGUF tensor name inside blk.{i}
LAYER_TENSORS = {
    "attn_norm": "attn_norm.weight",
    "wq": "attn_q.weight",
    "wk": "attn_k.weight",
    "wv": "attn_v.weight",
    "wo": "attn_output.weight",
    "ffn_norm": "ffn_norm.weight",
    "w_gate": "ffn_gate.weight",
    "w_up": "ffn_up.weight",
    "w_down": "ffn_down.weight",
    "bq": "attn_q.bias",
    "bk": "attn_k.bias",
    "bv": "attn_v.bias",
    "q_norm": "attn_q_norm.weight",
    "k_norm": "attn_k_norm.weight",
    "post_attn_norm": "post_attention_norm.weight",
    "post_ffn_norm": "post_ffw_norm.weight",
}
PERMUTED_ARCHS = ("llama",)  # Q/K stored for adjacent-pair RoPE
GEMMA3_SWA_PATTERN = 6  # llama.cpp's default: five local layers, then one global
GEMMA3_ROPE_BASE_SWA = 10000.0  # llama.cpp's default rope_freq_base_train_swa
_READERS: dict = {}  # (path, size, mtime) -> GGUFReader: the last file parsed


def _open(path: Path):
    import gguf

    if not path.is_file():
        raise CheckpointError(f"{path}: no such GGUF file")
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key in _READERS:
        return _READERS[key]
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as e:  # the reader raises ValueError, struct/IndexError on garbage
        raise CheckpointError(
            f"{path}: not a readable GGUF file (truncated or corrupt?): {type(e).__name__}: {e}"
        ) from e
    _READERS.clear()
    _READERS[key] = reader
    return reader


def open_reader(path):
    """The file's gguf.GGUFReader, parsed once per process (see the module docstring)."""
    return _open(Path(path))


def _field(reader, key: str):
    f = reader.fields.get(key)
    if f is None:
        return None
    v = f.contents()
    return v


def gguf_metadata(path) -> dict:
    """Every metadata field except the big tokenizer arrays, as Python values."""
    reader = _open(Path(path))
    big = (
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.merges",
        "tokenizer.ggml.token_type",
        "tokenizer.ggml.scores",
    )
    return {
        k: _field(reader, k) for k in reader.fields if k not in big and not k.startswith("GGUF.")
    }


def config_from_metadata(reader, path: Path, tensor_shapes: dict) -> DecoderConfig:
    """The spec from the file's own metadata keys ({arch}.block_count, ...)."""
    arch = _field(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise CheckpointError(
            f"{path}: general.architecture = {arch!r} is not supported "
            f"(supported: {', '.join(ARCHITECTURES)})"
        )

    def need(key):
        v = _field(reader, f"{arch}.{key}")
        if v is None:
            raise CheckpointError(f"{path}: metadata key {arch}.{key} is missing")
        return v

    def opt(key, default):
        v = _field(reader, f"{arch}.{key}")
        return default if v is None else v

    def count(key, default=None, minimum=1):
        """An integer metadata value >= minimum, else an error naming the key."""
        v = need(key) if default is None else opt(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
            raise CheckpointError(
                f"{path}: metadata key {arch}.{key} = {v!r}: must be an integer >= {minimum}"
            )
        return int(v)

    def number(key, default=None):
        """A finite positive metadata number, else an error naming the key."""
        v = need(key) if default is None else opt(key, default)
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float, np.number))
            or not (np.isfinite(v) and v > 0)
        ):
            raise CheckpointError(
                f"{path}: metadata key {arch}.{key} = {v!r}: must be a positive number"
            )
        return float(v)

    scaling = opt("rope.scaling.type", "none")
    if scaling not in ("none", None):
        raise CheckpointError(f"{path}: {arch}.rope.scaling.type = {scaling!r} is not supported")
    dim = count("embedding_length")
    n_heads = count("attention.head_count")
    n_layers = count("block_count")
    head_dim = count("attention.key_length", dim // n_heads)
    value_dim = count("attention.value_length", head_dim)
    if value_dim != head_dim:
        raise CheckpointError(
            f"{path}: {arch}.attention.value_length = {value_dim} != key_length "
            f"{head_dim} (not supported)"
        )
    rope_dims = count("rope.dimension_count", head_dim)
    if rope_dims != head_dim:
        raise CheckpointError(
            f"{path}: {arch}.rope.dimension_count = {rope_dims} != head dim "
            f"{head_dim} (partial rotary embeddings are not supported)"
        )
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    embed_rows = tensor_shapes.get("token_embd.weight", (None,))[0]
    vocab = opt("vocab_size", len(tokens.data) if tokens is not None else embed_rows)
    bos, eos = (
        _field(reader, "tokenizer.ggml.bos_token_id"),
        _field(reader, "tokenizer.ggml.eos_token_id"),
    )
    for key, v in (("bos", bos), ("eos", eos)):
        if (
            v is not None
            and vocab is not None
            and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v < vocab)
        ):
            raise CheckpointError(
                f"{path}: metadata key tokenizer.ggml.{key}_token_id = {v!r}: must be a token "
                f"id in 0..{vocab - 1}"
            )
    extra: dict = {}
    if arch == "qwen3":
        extra = dict(qk_norm=True)
    if arch == "gemma3":
        extra = _gemma3_fields(reader, path, n_layers, dim, n_heads, head_dim, count, number, opt)
    return DecoderConfig(
        arch=arch,
        n_layers=n_layers,
        dim=dim,
        n_heads=n_heads,
        n_kv_heads=count("attention.head_count_kv", n_heads),
        head_dim=head_dim,
        ffn_dim=count("feed_forward_length"),
        vocab_size=int(vocab),
        rope_theta=number("rope.freq_base", 10000.0),
        norm_eps=number("attention.layer_norm_rms_epsilon"),
        activation="gelu_tanh" if arch == "gemma3" else "silu",
        tied_embeddings="output.weight" not in tensor_shapes,
        max_positions=int(opt("context_length", 2048)),
        attention_bias="blk.0.attn_q.bias" in tensor_shapes,
        bos_id=None if bos is None else int(bos),
        eos_id=None if eos is None else int(eos),
        chat_template=_field(reader, "tokenizer.chat_template"),
        name=str(_field(reader, "general.name") or path.stem),
        **extra,
    )


def _gemma3_fields(reader, path, n_layers, dim, n_heads, head_dim, count, number, opt) -> dict:
    """The Gemma 3 parts of the config, read as llama.cpp reads them (module docstring)."""
    cap = opt("final_logit_softcapping", 0.0)
    if cap:
        raise CheckpointError(
            f"{path}: metadata key gemma3.final_logit_softcapping = {cap!r} is not supported"
        )
    window = count("attention.sliding_window", 0, minimum=0)
    local: tuple = ()
    if window:
        pattern = opt("attention.sliding_window_pattern", GEMMA3_SWA_PATTERN)
        if isinstance(pattern, list):
            if len(pattern) != n_layers or not all(
                isinstance(v, (bool, np.bool_)) for v in pattern
            ):
                raise CheckpointError(
                    f"{path}: metadata key gemma3.attention.sliding_window_pattern"
                    f" = {pattern!r}: must be {n_layers} booleans or an integer"
                )
            local = tuple(i for i, v in enumerate(pattern) if v)
        else:
            n = count("attention.sliding_window_pattern", GEMMA3_SWA_PATTERN, minimum=0)
            local = tuple(i for i in range(n_layers) if n == 0 or i % n < n - 1)
    scale_dim = dim // n_heads if n_layers == 62 else head_dim
    return dict(
        qk_norm=True,
        post_norms=True,
        embed_scale=float(np.sqrt(dim)),
        attn_scale=1.0 / float(np.sqrt(scale_dim)),
        sliding_window=window,
        local_layers=local,
        rope_theta_local=number("rope.freq_base_swa", GEMMA3_ROPE_BASE_SWA) if window else 0.0,
    )


def unpermute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo convert_hf_to_gguf.py's `permute` on Q or K rows (a weight (H*hd, D) or bias (H*hd,)):
    GGUF row order within a head is (pair j, half h) -> HF's (half h, pair j)."""
    rest = w.shape[1:]
    hd = w.shape[0] // n_heads
    return w.reshape(n_heads, hd // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)


def permute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """convert_hf_to_gguf.py's `permute` (HF rotate-half rows -> GGUF adjacent pairs)."""
    rest = w.shape[1:]
    hd = w.shape[0] // n_heads
    return w.reshape(n_heads, 2, hd // 2, *rest).swapaxes(1, 2).reshape(w.shape)


def _dequantize(t, path: Path) -> np.ndarray:
    import gguf

    shape = tuple(int(d) for d in reversed(t.shape.tolist()))
    block, type_size = gguf.GGML_QUANT_SIZES[t.tensor_type]
    if t.data.nbytes != t.n_elements * type_size // block:
        raise CheckpointError(
            f"{path}: tensor {t.name} has {t.data.nbytes} bytes, its "
            f"{t.tensor_type.name} shape {shape} needs "
            f"{t.n_elements * type_size // block} (truncated file?)"
        )
    try:
        a = gguf.quants.dequantize(t.data, t.tensor_type)
    except NotImplementedError as e:
        raise CheckpointError(
            f"{path}: tensor {t.name} is {t.tensor_type.name}, which gguf cannot dequantize"
        ) from e
    return np.asarray(a, dtype=np.float32).reshape(shape)


def read_gguf_config(path) -> DecoderConfig:
    """The model's config from the metadata alone (no tensor is dequantized)."""
    path = Path(path)
    reader = _open(path)
    shapes = {t.name: tuple(int(d) for d in reversed(t.shape.tolist())) for t in reader.tensors}
    return config_from_metadata(reader, path, shapes)


def read_gguf_tensor_types(path) -> dict[str, str]:
    """Tensor name -> its GGUF type name ("Q4_1", "F32"), from the header alone."""
    return {t.name: t.tensor_type.name for t in _open(Path(path)).tensors}


# GGUF tensor types kept as stored for the `as-stored` policy -> our format name (the formats
# table's GGUF types, quant/formats.py)
STORED_TYPES = {t: f.name for t, f in BY_GGUF_TYPE.items()}
# LayerWeights field -> HF short name of the Linear (the name a policy matches)
LINEAR_FIELDS = {
    "wq": "q_proj",
    "wk": "k_proj",
    "wv": "v_proj",
    "wo": "o_proj",
    "w_gate": "gate_proj",
    "w_up": "up_proj",
    "w_down": "down_proj",
}


def _stored_matrix(t, path: Path, rows=None):
    """A 2-D tensor as the file stores it (a float array, or its format's block container:
    GGMLTensor, KQuantTensor), rows reordered by `rows`; None for a type we cannot run as stored
    (not in STORED_TYPES)."""
    from harmony_ref.kernels.formats import FORMATS

    facts = BY_GGUF_TYPE.get(t.tensor_type.name)
    if facts is None:
        return None
    n, k = (int(d) for d in reversed(t.shape.tolist()))
    if facts.dtype is not None:  # a float format: the (N, K) array itself
        a = np.asarray(t.data, dtype=facts.dtype).reshape(n, k)
    else:
        a = np.asarray(t.data, dtype=np.uint8).reshape(n, -1)
    a = np.ascontiguousarray(a if rows is None else a[rows])
    if facts.dtype is not None:
        return a
    return FORMATS[facts.name].from_arrays({".blocks": a}, (n, k))


def _unpermute_order(n_rows: int, n_heads: int) -> np.ndarray:
    """Row order that undoes `permute` (unpermute_rope_rows applied to row indices)."""
    return unpermute_rope_rows(np.arange(n_rows), n_heads)


def read_gguf(path, keep_stored: bool = False) -> DecoderWeights:
    """All tensors of a llama/qwen2 GGUF file as FP32 DecoderWeights, validated. keep_stored:
    also each Linear as the file stores it (DecoderWeights.stored; the `as-stored` policy)."""
    path = Path(path)
    reader = _open(path)
    tensors = {t.name: t for t in reader.tensors}
    shapes = {
        name: tuple(int(d) for d in reversed(t.shape.tolist())) for name, t in tensors.items()
    }
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
            wanted = key not in OPTIONAL_TENSORS or getattr(config, OPTIONAL_TENSORS[key])
            a = get(f"blk.{i}.{suffix}", required=True) if wanted else None
            if a is not None and permuted and key in ("wq", "bq"):
                a = _unpermute_checked(a, config.n_heads, path, f"blk.{i}.{suffix}")
            if a is not None and permuted and key in ("wk", "bk"):
                a = _unpermute_checked(a, config.n_kv_heads, path, f"blk.{i}.{suffix}")
            fields[key] = a
        layers.append(LayerWeights(**fields))
    stored_linears = _stored_linears(tensors, config, path) if keep_stored else {}
    weights = DecoderWeights(
        config=config,
        embed=get("token_embd.weight"),
        layers=layers,
        final_norm=get("output_norm.weight"),
        lm_head=get("output.weight", required=False),
        source=str(path),
        stored_formats=stored,
        stored=stored_linears,
    )
    validate_weights(weights, _gguf_name)
    return weights


def _stored_linears(tensors: dict, config: DecoderConfig, path: Path) -> dict:
    """Linear name -> the matrix as stored, in the in-memory row order (Q/K unpermuted)."""
    from harmony_ref.model.decoder import layer_name

    permuted = config.arch in PERMUTED_ARCHS
    out = {}
    for i in range(config.n_layers):
        for key, short in LINEAR_FIELDS.items():
            t = tensors[f"blk.{i}.{LAYER_TENSORS[key]}"]
            rows = None
            if permuted and key in ("wq", "wk"):
                heads = config.n_heads if key == "wq" else config.n_kv_heads
                rows = _unpermute_order(int(t.shape[1]), heads)
            m = _stored_matrix(t, path, rows)
            if m is not None:
                out[layer_name(i, short)] = m
    head = tensors.get("output.weight", tensors["token_embd.weight"])
    m = _stored_matrix(head, path)
    if m is not None:
        out["lm_head"] = m
    return out


def _unpermute_checked(a, n_heads, path, name):
    if a.shape[0] % (2 * n_heads):
        raise CheckpointError(
            f"{path}: tensor {name} has shape {a.shape}: rows not a multiple of 2 x {n_heads} heads"
        )
    return unpermute_rope_rows(a, n_heads)


def _gguf_name(key: str) -> str:
    """In-memory key ("layer 3 wq", "embed") -> the GGUF tensor name, for error messages."""
    parts = key.split()
    if parts[0] == "layer":
        return f"blk.{parts[1]}.{LAYER_TENSORS[parts[2]]}"
    return {
        "embed": "token_embd.weight",
        "final_norm": "output_norm.weight",
        "lm_head": "output.weight",
    }[parts[0]]


# ----------------------------------------------------------------------------------------------
# Writing (tests and tools): FP32 weights -> a GGUF file llama.cpp can read


def write_gguf(
    weights: DecoderWeights,
    path,
    *,
    tokens=None,
    token_types=None,
    merges=None,
    pre: str = "smollm",
    qtype: str = "F32",
    scores=None,
    add_bos: bool = False,
) -> None:
    """Write `weights` as a GGUF of its architecture (Q/K permuted back for llama), F32 or F16
    tensors. With `scores` the vocabulary is a SentencePiece one (tokenizer.ggml.model = llama),
    else byte-level BPE over `merges`."""
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
    if c.head_dim != c.dim // c.n_heads or c.arch == "gemma3":
        w.add_key_length(c.head_dim)
        w.add_value_length(c.head_dim)
    if c.sliding_window:
        w.add_sliding_window(c.sliding_window)
        w.add_sliding_window_pattern([i in c.local_layers for i in range(c.n_layers)])
        w.add_rope_freq_base_swa(c.rope_theta_local or c.rope_theta)
    if tokens is not None:
        w.add_tokenizer_model("gpt2" if scores is None else "llama")
        w.add_tokenizer_pre(pre if scores is None else "default")
        w.add_token_list(tokens)
        w.add_token_types(token_types if token_types is not None else [1] * len(tokens))
        if scores is not None:
            w.add_token_scores(scores)
            w.add_add_space_prefix(False)
        if merges is not None:
            w.add_token_merges(merges)
        w.add_add_bos_token(add_bos)
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
