"""Hugging Face checkpoints from a local directory: `config.json` plus `model.safetensors` or a
sharded `model.safetensors.index.json`, for LlamaForCausalLM, Qwen2ForCausalLM (q/k/v biases),
Qwen3ForCausalLM (q/k head norms) and Gemma3ForCausalLM (Gemma 3 text), read with the
`safetensors` package into the same in-memory model as the GGUF reader.

Gemma 3's config.json in either form transformers writes: `layer_types` (or the older
`sliding_window_pattern`, default 6) for the local layers, `rope_parameters` per layer type (or
the older `rope_theta` + `rope_local_base_freq`); the query scale is query_pre_attn_scalar^-0.5,
and each norm's stored weight w means (1 + w) (Gemma3RMSNorm), so 1 is added on reading (and
taken off on writing). Its `post_attention_layernorm` is the attention output's norm and
`pre_feedforward_layernorm` the FFN's input norm, unlike Llama's names.

    weights = read_hf_dir("path/to/model")       # -> DecoderWeights (FP32, rotate-half RoPE)
    write_hf_dir(weights, "out/")                # the inverse (tests, and GGUF -> HF export)

HF's Q/K rows already use rotate-half, our in-memory layout, so nothing is permuted. F32, F16 and
BF16 tensors are widened to FP32 (BF16 by its bit pattern: numpy has no bfloat16). Errors are
CheckpointErrors naming the file and the tensor or config field.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from harmony_ref.model.decoder import (
    OPTIONAL_TENSORS,
    CheckpointError,
    DecoderConfig,
    DecoderWeights,
    LayerWeights,
    validate_weights,
)

ARCH_BY_CLASS = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Gemma3ForCausalLM": "gemma3",
}
MODEL_TYPE = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3": "gemma3_text"}
# in-memory LayerWeights field -> HF tensor name inside model.layers.{i}
LAYER_TENSORS = {
    "attn_norm": "input_layernorm.weight",
    "wq": "self_attn.q_proj.weight",
    "wk": "self_attn.k_proj.weight",
    "wv": "self_attn.v_proj.weight",
    "wo": "self_attn.o_proj.weight",
    "ffn_norm": "post_attention_layernorm.weight",
    "w_gate": "mlp.gate_proj.weight",
    "w_up": "mlp.up_proj.weight",
    "w_down": "mlp.down_proj.weight",
    "bq": "self_attn.q_proj.bias",
    "bk": "self_attn.k_proj.bias",
    "bv": "self_attn.v_proj.bias",
    "q_norm": "self_attn.q_norm.weight",
    "k_norm": "self_attn.k_norm.weight",
}
GEMMA3_LAYER_TENSORS = dict(
    LAYER_TENSORS,
    ffn_norm="pre_feedforward_layernorm.weight",
    post_attn_norm="post_attention_layernorm.weight",
    post_ffn_norm="post_feedforward_layernorm.weight",
)
NORM_FIELDS = ("attn_norm", "ffn_norm", "q_norm", "k_norm", "post_attn_norm", "post_ffn_norm")
GEMMA3_SWA_PATTERN = 6  # transformers' default: five sliding-window layers, then one full


def layer_tensors(arch: str) -> dict[str, str]:
    return GEMMA3_LAYER_TENSORS if arch == "gemma3" else LAYER_TENSORS


def _rope_theta(
    cfg: dict,
    where: str,
    layer_type: str | None = None,
    legacy_key: str = "rope_theta",
    default: float = 10000.0,
) -> float:
    """The RoPE base from `rope_parameters` (per layer type when nested) or the older top-level
    key; any rope_type but "default" (a stretch of the frequencies) is refused."""
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and layer_type is not None and layer_type in params:
        params = params[layer_type]
    if isinstance(params, dict) and "rope_theta" in params:
        kind = params.get("rope_type", "default")
        if kind != "default":
            raise CheckpointError(
                f"{where}: field 'rope_parameters' rope_type = {kind!r} is not "
                "supported (only 'default')"
            )
        return _hf_number(params["rope_theta"], "rope_parameters.rope_theta", where)
    return _hf_number(cfg.get(legacy_key, default), legacy_key, where)


def _hf_number(v, key: str, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise CheckpointError(f"{where}: field {key!r} = {v!r}: must be a number")
    return float(v)


_MISSING = object()


def _hf_int(cfg: dict, key: str, where: str, default=_MISSING, minimum: int = 1) -> int:
    """A config.json integer (not a float, a string or a bool), else an error naming it."""
    v = cfg.get(key, default)
    if v is _MISSING:
        raise CheckpointError(f"{where}: field {key!r} is missing")
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise CheckpointError(f"{where}: field {key!r} = {v!r}: must be an integer >= {minimum}")
    return v


def _hf_bool(cfg: dict, key: str, where: str, default: bool) -> bool:
    v = cfg.get(key, default)
    if not isinstance(v, bool):  # "false" is a string, and truthy
        raise CheckpointError(f"{where}: field {key!r} = {v!r}: must be true or false")
    return v


def _hf_token_id(v, key: str, where: str, vocab: int):
    """A special token id within the vocabulary (or None)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < vocab:
        raise CheckpointError(
            f"{where}: field {key!r} = {v!r}: must be a token id in 0..{vocab - 1}"
        )
    return v


def config_from_hf(cfg: dict, where: str) -> DecoderConfig:
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{where}: must be a JSON object, got {type(cfg).__name__}")
    archs = cfg.get("architectures") or []
    if not isinstance(archs, list):
        raise CheckpointError(f"{where}: field 'architectures' = {archs!r}: must be a list")
    arch = next((ARCH_BY_CLASS[a] for a in archs if a in ARCH_BY_CLASS), None)
    if arch is None:
        raise CheckpointError(
            f"{where}: field 'architectures' = {archs!r}: supported {sorted(ARCH_BY_CLASS)}"
        )

    if cfg.get("rope_scaling") not in (None, {}):
        raise CheckpointError(
            f"{where}: field 'rope_scaling' = {cfg['rope_scaling']!r} is not supported"
        )
    if cfg.get("use_sliding_window"):
        raise CheckpointError(f"{where}: field 'use_sliding_window' = true is not supported")
    act_key = (
        "hidden_activation" if arch == "gemma3" and "hidden_activation" in cfg else "hidden_act"
    )
    act = cfg.get(act_key, "gelu_pytorch_tanh" if arch == "gemma3" else "silu")
    want = "gelu_pytorch_tanh" if arch == "gemma3" else "silu"
    if act != want:
        raise CheckpointError(f"{where}: field {act_key!r} = {act!r}: {arch} needs {want!r}")
    dim, n_heads = _hf_int(cfg, "hidden_size", where), _hf_int(cfg, "num_attention_heads", where)
    vocab = _hf_int(cfg, "vocab_size", where)
    eos = cfg.get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    bias = arch == "qwen2" or bool(cfg.get("attention_bias", False))
    if arch == "llama" and cfg.get("mlp_bias"):
        raise CheckpointError(f"{where}: field 'mlp_bias' = true is not supported")
    n_layers = _hf_int(cfg, "num_hidden_layers", where)
    head_dim = _hf_int(cfg, "head_dim", where, None) if cfg.get("head_dim") else dim // n_heads
    if head_dim < 1:
        raise CheckpointError(
            f"{where}: field 'hidden_size' = {dim}: fewer than 'num_attention_heads' = {n_heads}"
        )
    extra: dict = {"qk_norm": True} if arch == "qwen3" else {}
    if arch == "gemma3":
        extra = _gemma3_fields(cfg, where, n_layers, dim)
    norm_eps = _hf_number(cfg.get("rms_norm_eps", 1e-6), "rms_norm_eps", where)
    kw = dict(
        arch=arch,
        n_layers=n_layers,
        dim=dim,
        n_heads=n_heads,
        n_kv_heads=_hf_int(cfg, "num_key_value_heads", where, n_heads)
        if cfg.get("num_key_value_heads") is not None
        else n_heads,
        head_dim=head_dim,
        ffn_dim=_hf_int(cfg, "intermediate_size", where),
        vocab_size=vocab,
        rope_theta=_rope_theta(cfg, where, "full_attention"),
        norm_eps=float(norm_eps),
        activation="gelu_tanh" if arch == "gemma3" else "silu",
        tied_embeddings=_hf_bool(cfg, "tie_word_embeddings", where, arch == "gemma3"),
        max_positions=_hf_int(cfg, "max_position_embeddings", where, 2048),
        attention_bias=bias,
        bos_id=_hf_token_id(cfg.get("bos_token_id"), "bos_token_id", where, vocab),
        eos_id=_hf_token_id(eos, "eos_token_id", where, vocab),
        name=str(cfg.get("_name_or_path") or Path(where).parent.name),
        **extra,
    )
    try:
        return DecoderConfig(**kw)
    except CheckpointError as e:  # the dataclass's own checks, named by the file
        raise CheckpointError(f"{where}: {e}") from None


def _gemma3_fields(cfg: dict, where: str, n_layers: int, dim: int) -> dict:
    """Gemma3TextConfig's fields beyond Llama's (see the module docstring)."""
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        if cfg.get(key) is not None:
            raise CheckpointError(f"{where}: field {key!r} = {cfg[key]!r} is not supported")
    if cfg.get("use_bidirectional_attention"):
        raise CheckpointError(
            f"{where}: field 'use_bidirectional_attention' = true is not "
            "supported (a causal decoder only)"
        )
    window = cfg.get("sliding_window") or 0
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise CheckpointError(
            f"{where}: field 'sliding_window' = {window!r}: must be an integer >= 0"
        )
    types = cfg.get("layer_types")
    if types is None:
        n = cfg.get(
            "sliding_window_pattern", cfg.get("_sliding_window_pattern", GEMMA3_SWA_PATTERN)
        )
        types = [
            "full_attention" if (i + 1) % n == 0 else "sliding_attention" for i in range(n_layers)
        ]
    known = ("sliding_attention", "full_attention")
    if len(types) != n_layers or any(t not in known for t in types):
        raise CheckpointError(
            f"{where}: field 'layer_types' = {types!r}: must be {n_layers} of {known}"
        )
    local = tuple(i for i, t in enumerate(types) if t == "sliding_attention") if window else ()
    scalar = cfg.get("query_pre_attn_scalar", 256)
    if isinstance(scalar, bool) or not isinstance(scalar, (int, float)) or not scalar > 0:
        raise CheckpointError(
            f"{where}: field 'query_pre_attn_scalar' = {scalar!r}: must be a positive number"
        )
    return dict(
        qk_norm=True,
        post_norms=True,
        embed_scale=float(np.sqrt(dim)),
        attn_scale=float(scalar) ** -0.5,
        sliding_window=int(window),
        local_layers=local,
        rope_theta_local=_rope_theta(
            cfg, where, "sliding_attention", "rope_local_base_freq", 10000.0
        ),
    )


def _bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    return (raw.astype(np.uint32) << 16).view(np.float32)


class _Tensors:
    """name -> (file, safetensors handle) over one file or the shards of an index."""

    def __init__(self, d: Path):
        from safetensors import safe_open

        single, index = d / "model.safetensors", d / "model.safetensors.index.json"
        if single.is_file():
            files = [single]
        elif index.is_file():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (ValueError, KeyError) as e:
                raise CheckpointError(f"{index}: not a safetensors index ({e})") from e
            files = [d / f for f in dict.fromkeys(weight_map.values())]
        else:
            raise CheckpointError(f"{d}: no model.safetensors or model.safetensors.index.json")
        self.where: dict[str, tuple[Path, object]] = {}
        self.stored: dict[str, str] = {}
        for f in files:
            if not f.is_file():
                raise CheckpointError(f"{f}: shard listed in the index is missing")
            try:
                h = safe_open(str(f), framework="numpy")
                names = list(h.keys())
            except Exception as e:
                raise CheckpointError(f"{f}: not a readable safetensors file: {e}") from e
            for n in names:
                self.where[n] = (f, h)

    def get(self, name: str, required: bool = True):
        if name not in self.where:
            if required:
                files = sorted({str(f) for f, _ in self.where.values()})
                raise CheckpointError(f"{', '.join(files)}: tensor {name} is missing")
            return None
        f, h = self.where[name]
        sl = h.get_slice(name)
        dtype = sl.get_dtype()
        self.stored[name] = dtype
        try:
            if dtype == "BF16":
                return _read_bf16(f, name)
            return np.asarray(h.get_tensor(name), dtype=np.float32)
        except Exception as e:
            raise CheckpointError(f"{f}: tensor {name} cannot be read ({dtype}): {e}") from e


def _read_bf16(f: Path, name: str) -> np.ndarray:
    """A BF16 tensor by its byte range in the safetensors header (numpy has no bfloat16)."""
    with open(f, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
        info = header[name]
        start, end = info["data_offsets"]
        fh.seek(8 + n + start)
        raw = np.frombuffer(fh.read(end - start), dtype=np.uint16)
    return _bf16_to_f32(raw).reshape(info["shape"])


def read_hf_config(directory) -> DecoderConfig:
    """The model's config from config.json alone."""
    d = Path(directory)
    cfg_path = d / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{d}: no config.json (not a Hugging Face model directory)")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise CheckpointError(f"{cfg_path}: not valid JSON: {e}") from e
    return config_from_hf(cfg, str(cfg_path))


def read_hf_dir(directory) -> DecoderWeights:
    d = Path(directory)
    config = read_hf_config(d)
    tensors = _Tensors(d)
    shift = np.float32(1.0 if config.arch == "gemma3" else 0.0)  # Gemma's norms scale by 1 + w
    names = layer_tensors(config.arch)
    layers = []
    for i in range(config.n_layers):
        fields = {}
        for key, suffix in names.items():
            if key in OPTIONAL_TENSORS and not getattr(config, OPTIONAL_TENSORS[key]):
                continue
            a = tensors.get(f"model.layers.{i}.{suffix}")
            fields[key] = a + shift if key in NORM_FIELDS else a
        layers.append(LayerWeights(**fields))
    # a tied checkpoint may still carry lm_head.weight (a copy): the config decides
    lm_head = None if config.tied_embeddings else tensors.get("lm_head.weight")
    weights = DecoderWeights(
        config,
        tensors.get("model.embed_tokens.weight"),
        layers,
        tensors.get("model.norm.weight") + shift,
        lm_head,
        source=str(d),
        stored_formats=tensors.stored,
    )
    arch = config.arch
    validate_weights(weights, lambda key: _hf_name(key, arch))
    return weights


def _hf_name(key: str, arch: str = "llama") -> str:
    """In-memory key ("layer 3 wq", "embed") -> the HF tensor name, for error messages."""
    parts = key.split()
    if parts[0] == "layer":
        return f"model.layers.{parts[1]}.{layer_tensors(arch)[parts[2]]}"
    return {
        "embed": "model.embed_tokens.weight",
        "final_norm": "model.norm.weight",
        "lm_head": "lm_head.weight",
    }[parts[0]]


def hf_config_dict(c: DecoderConfig) -> dict:
    cls = {v: k for k, v in ARCH_BY_CLASS.items()}[c.arch]
    d = {
        "architectures": [cls],
        "model_type": MODEL_TYPE[c.arch],
        "hidden_size": c.dim,
        "intermediate_size": c.ffn_dim,
        "num_hidden_layers": c.n_layers,
        "num_attention_heads": c.n_heads,
        "num_key_value_heads": c.n_kv_heads,
        "head_dim": c.head_dim,
        "vocab_size": c.vocab_size,
        "rope_theta": c.rope_theta,
        "rms_norm_eps": c.norm_eps,
        "hidden_act": "silu",
        "tie_word_embeddings": c.tied_embeddings,
        "max_position_embeddings": c.max_positions,
        "bos_token_id": c.bos_id,
        "eos_token_id": c.eos_id,
        "rope_scaling": None,
        "torch_dtype": "float32",
    }
    if c.arch == "llama":
        d["attention_bias"] = c.attention_bias
        d["mlp_bias"] = False
    if c.arch == "qwen3":
        d["attention_bias"] = c.attention_bias
        d["use_sliding_window"] = False
    if c.arch == "gemma3":  # transformers 5's form: rope_parameters and layer_types
        del d["hidden_act"], d["rope_theta"]
        scalar = c.query_scale**-2  # transformers wants an int where it is one
        d.update(
            hidden_activation="gelu_pytorch_tanh",
            query_pre_attn_scalar=round(scalar) if abs(scalar - round(scalar)) < 1e-6 else scalar,
            sliding_window=c.sliding_window or None,
            final_logit_softcapping=None,
            attn_logit_softcapping=None,
            layer_types=[
                "sliding_attention" if c.is_local(i) else "full_attention"
                for i in range(c.n_layers)
            ],
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": c.rope_theta},
                "sliding_attention": {
                    "rope_type": "default",
                    "rope_theta": c.rope_theta_local or c.rope_theta,
                },
            },
        )
    return d


def write_hf_dir(weights: DecoderWeights, directory, dtype=np.float32) -> Path:
    """config.json + model.safetensors (F32 or F16) in HF's names and layout."""
    from safetensors.numpy import save_file

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    c = weights.config
    shift = np.float32(1.0 if c.arch == "gemma3" else 0.0)  # Gemma stores norms as w - 1
    t = {
        "model.embed_tokens.weight": weights.embed,
        "model.norm.weight": weights.final_norm - shift,
    }
    for i, lw in enumerate(weights.layers):
        for key, suffix in layer_tensors(c.arch).items():
            a = getattr(lw, key)
            if a is not None:
                t[f"model.layers.{i}.{suffix}"] = a - shift if key in NORM_FIELDS else a
    if weights.lm_head is not None:
        t["lm_head.weight"] = weights.lm_head
    save_file(
        {k: np.ascontiguousarray(v, dtype=dtype) for k, v in t.items()},
        str(d / "model.safetensors"),
        metadata={"format": "pt"},
    )
    (d / "config.json").write_text(json.dumps(hf_config_dict(c), indent=2) + "\n")
    return d
