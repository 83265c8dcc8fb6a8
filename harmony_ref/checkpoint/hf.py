"""Hugging Face checkpoints from a local directory: `config.json` plus `model.safetensors` or a
sharded `model.safetensors.index.json`, for LlamaForCausalLM and Qwen2ForCausalLM (q/k/v biases),
read with the `safetensors` package into the same in-memory model as the GGUF reader.

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
    CheckpointError,
    DecoderConfig,
    DecoderWeights,
    LayerWeights,
    validate_weights,
)

ARCH_BY_CLASS = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}
# in-memory LayerWeights field -> HF tensor name inside model.layers.{i}
LAYER_TENSORS = {
    "attn_norm": "input_layernorm.weight", "wq": "self_attn.q_proj.weight",
    "wk": "self_attn.k_proj.weight", "wv": "self_attn.v_proj.weight",
    "wo": "self_attn.o_proj.weight", "ffn_norm": "post_attention_layernorm.weight",
    "w_gate": "mlp.gate_proj.weight", "w_up": "mlp.up_proj.weight",
    "w_down": "mlp.down_proj.weight", "bq": "self_attn.q_proj.bias",
    "bk": "self_attn.k_proj.bias", "bv": "self_attn.v_proj.bias",
}


def config_from_hf(cfg: dict, where: str) -> DecoderConfig:
    archs = cfg.get("architectures") or []
    arch = next((ARCH_BY_CLASS[a] for a in archs if a in ARCH_BY_CLASS), None)
    if arch is None:
        raise CheckpointError(f"{where}: field 'architectures' = {archs!r}: supported "
                              f"{sorted(ARCH_BY_CLASS)}")

    def need(key):
        if key not in cfg:
            raise CheckpointError(f"{where}: field {key!r} is missing")
        return cfg[key]

    if cfg.get("rope_scaling") not in (None, {}):
        raise CheckpointError(f"{where}: field 'rope_scaling' = {cfg['rope_scaling']!r} is not "
                              "supported")
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise CheckpointError(f"{where}: field 'hidden_act' = {act!r}: only 'silu' (SwiGLU)")
    dim, n_heads = int(need("hidden_size")), int(need("num_attention_heads"))
    eos = cfg.get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    bias = arch == "qwen2" or bool(cfg.get("attention_bias", False))
    if arch == "llama" and cfg.get("mlp_bias"):
        raise CheckpointError(f"{where}: field 'mlp_bias' = true is not supported")
    return DecoderConfig(
        arch=arch,
        n_layers=int(need("num_hidden_layers")),
        dim=dim,
        n_heads=n_heads,
        n_kv_heads=int(cfg.get("num_key_value_heads") or n_heads),
        head_dim=int(cfg.get("head_dim") or dim // n_heads),
        ffn_dim=int(need("intermediate_size")),
        vocab_size=int(need("vocab_size")),
        rope_theta=float(cfg.get("rope_theta", 10000.0)),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        activation="silu",
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_positions=int(cfg.get("max_position_embeddings", 2048)),
        attention_bias=bias,
        bos_id=cfg.get("bos_token_id"),
        eos_id=eos,
        name=str(cfg.get("_name_or_path") or Path(where).parent.name),
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
    layers = []
    for i in range(config.n_layers):
        fields = {}
        for key, suffix in LAYER_TENSORS.items():
            required = not key.startswith("b") or config.attention_bias
            fields[key] = tensors.get(f"model.layers.{i}.{suffix}", required)
        layers.append(LayerWeights(**fields))
    lm_head = None if config.tied_embeddings else tensors.get("lm_head.weight")
    weights = DecoderWeights(config, tensors.get("model.embed_tokens.weight"), layers,
                             tensors.get("model.norm.weight"), lm_head, source=str(d),
                             stored_formats=tensors.stored)
    validate_weights(weights, _hf_name)
    return weights


def _hf_name(key: str) -> str:
    """In-memory key ("layer 3 wq", "embed") -> the HF tensor name, for error messages."""
    parts = key.split()
    if parts[0] == "layer":
        return f"model.layers.{parts[1]}.{LAYER_TENSORS[parts[2]]}"
    return {"embed": "model.embed_tokens.weight", "final_norm": "model.norm.weight",
            "lm_head": "lm_head.weight"}[parts[0]]


def hf_config_dict(c: DecoderConfig) -> dict:
    cls = {v: k for k, v in ARCH_BY_CLASS.items()}[c.arch]
    d = {
        "architectures": [cls], "model_type": c.arch, "hidden_size": c.dim,
        "intermediate_size": c.ffn_dim, "num_hidden_layers": c.n_layers,
        "num_attention_heads": c.n_heads, "num_key_value_heads": c.n_kv_heads,
        "head_dim": c.head_dim, "vocab_size": c.vocab_size, "rope_theta": c.rope_theta,
        "rms_norm_eps": c.norm_eps, "hidden_act": "silu", "tie_word_embeddings": c.tied_embeddings,
        "max_position_embeddings": c.max_positions, "bos_token_id": c.bos_id,
        "eos_token_id": c.eos_id, "rope_scaling": None, "torch_dtype": "float32",
    }
    if c.arch == "llama":
        d["attention_bias"] = c.attention_bias
        d["mlp_bias"] = False
    return d


def write_hf_dir(weights: DecoderWeights, directory, dtype=np.float32) -> Path:
    """config.json + model.safetensors (F32 or F16) in HF's names and layout."""
    from safetensors.numpy import save_file

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    c = weights.config
    t = {"model.embed_tokens.weight": weights.embed, "model.norm.weight": weights.final_norm}
    for i, lw in enumerate(weights.layers):
        for key, suffix in LAYER_TENSORS.items():
            a = getattr(lw, key)
            if a is not None:
                t[f"model.layers.{i}.{suffix}"] = a
    if weights.lm_head is not None:
        t["lm_head.weight"] = weights.lm_head
    save_file({k: np.ascontiguousarray(v, dtype=dtype) for k, v in t.items()},
              str(d / "model.safetensors"), metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(hf_config_dict(c), indent=2) + "\n")
    return d
