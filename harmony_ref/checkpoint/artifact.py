"""Quantized weight artifacts: safetensors files with a SHA-256 manifest, verified on every load.

    harmony-ref export --policy int4-g32 minilm-int4.safetensors
    harmony-ref verify minilm-int4.safetensors        # exit 0 ok, 1 refused (names the tensor)

Layout (format version 2). Every tensor the forward needs, under its checkpoint name, with each
Linear's weight stored in its policy format:

    <linear>.weight                  float32 or float16      fp32 / fp16
    <linear>.weight.values, .scale   int8 (N, K), float32 (N,)                           int8
    <linear>.weight.packed, .scale, .zero_point
                                     uint8 (N, K/2), float16 (N, K/g), int8 (N, K/g)     int4 asym
    everything else (embeddings, LayerNorms, biases)   float32

Manifest, in the safetensors header's `__metadata__` (strings only, by the format):

    format            "harmony-ref-quantized-encoder"
    format_version    "2"
    policy            the policy as TOML (it reloads with harmony_ref.quant.policy)
    layers            JSON {linear: {"format", "shape", "group_size", "scheme"}}
    tensor_sha256     JSON {tensor: SHA-256 of its raw little-endian bytes}
    payload_sha256    SHA-256 of the whole data section (all tensor bytes as laid out in the file)
    header_sha256     SHA-256 of the header itself (tensor dtypes, shapes, offsets and every
                      manifest field but this one), as canonical JSON (sorted keys, no spaces)
    model_sha256      SHA-256 fingerprint of the FP32 Linear weights it was quantized from
    n_heads, max_seq_len, tokenizer_json   what the forward needs besides tensors

A file cannot hold the hash of itself, so the whole file is covered in two parts: header_sha256
(the header's content; a changed policy, layer format or group size is refused, not misread) and
payload_sha256 (every byte after the header); `verify` also prints the file's own SHA-256 for
pinning elsewhere. Verification parses the header itself (checkpoint/safetensors.py: the library
would only say "invalid header" for a truncated file), checks the header hash, every tensor's byte range against
the file length, every tensor's hash, the payload hash and that no bytes trail the data: each
failure raises ArtifactError naming the tensor or manifest part. Loading verifies and decodes the
same bytes read once, so the file cannot change in between. Each Linear's arrays are named and
rebuilt by its format's entry in kernels/formats.py. Files are written atomically (_io.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harmony_ref._io import write_checked
from harmony_ref.checkpoint.safetensors import DTYPES, SafetensorsError, split
from harmony_ref.kernels.formats import format_of, stored_format
from harmony_ref.quant.policy import WeightFormat, load_policy, parse_format

FORMAT = "harmony-ref-quantized-encoder"
FORMAT_VERSION = "2"  # 2: header_sha256 added


class ArtifactError(ValueError):
    """An artifact that must not be used: truncated, tampered with, or not ours."""


def _sha(b) -> str:
    return hashlib.sha256(b).hexdigest()


def _header_sha(header: dict) -> str:
    """SHA-256 of a parsed safetensors header, without its own header_sha256 field."""
    meta = {k: v for k, v in header.get("__metadata__", {}).items() if k != "header_sha256"}
    canonical = {**header, "__metadata__": meta}
    return _sha(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode())


def _linear_tensors(name: str, stored) -> dict[str, np.ndarray]:
    arrays = format_of(stored_format(stored)).arrays(stored)
    return {f"{name}.weight{suffix}": a for suffix, a in arrays.items()}


def _layer_info(stored) -> dict:
    fmt = stored_format(stored)
    info = {"format": fmt.name, "shape": list(stored.shape)}
    if fmt.facts.grouped:
        info.update(group_size=fmt.group_size, scheme=fmt.scheme)
    return info


def export_artifact(model, policy, path: str | Path) -> dict:
    """Write `model` with its Linears in `policy`'s formats to `path`; returns the manifest."""
    from safetensors.numpy import save

    pol = load_policy(policy)
    linears = model.linears(pol)
    weight_names = {n + ".weight" for n in linears}
    tensors = {k: np.ascontiguousarray(v) for k, v in model.params.items() if k not in weight_names}
    layers = {}
    for name, q in linears.items():
        tensors.update(
            {k: np.ascontiguousarray(v) for k, v in _linear_tensors(name, q.stored).items()}
        )
        layers[name] = _layer_info(q.stored)
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "policy": pol.to_toml(),
        "layers": json.dumps(layers, sort_keys=True),
        "tensor_sha256": json.dumps({k: _sha(v.tobytes()) for k, v in sorted(tensors.items())}),
        "model_sha256": model.weights_fingerprint(),
        "n_heads": str(model.n_heads),
        "max_seq_len": str(model.max_seq_len),
        "tokenizer_json": model.tokenizer.to_str(),
    }
    # The hashes go into the header, so save twice: once to learn the layout they cover.
    meta["payload_sha256"] = _sha(_split(save(tensors, metadata=meta), "<memory>")[2])
    header, _, payload = _split(save(tensors, metadata=meta), "<memory>")
    meta["header_sha256"] = _header_sha(header)
    blob2 = save(tensors, metadata=meta)
    header2, _, payload2 = _split(blob2, "<memory>")
    if payload2 != payload or _header_sha(header2) != meta["header_sha256"]:  # pragma: no cover
        raise RuntimeError("safetensors laid the same tensors out differently twice")
    write_checked(path, blob2, verify_artifact)  # what we wrote must pass what every load checks
    return meta


def _split(blob: bytes, source: str) -> tuple[dict, int, bytes]:
    """(header dict, data offset, data section) of a safetensors file, or ArtifactError."""
    try:
        return split(blob, source)
    except SafetensorsError as e:
        raise ArtifactError(str(e)) from e


@dataclass(frozen=True)
class Verified:
    path: str
    file_sha256: str
    metadata: dict
    header: dict  # tensor name -> {"dtype", "shape", "data_offsets"}
    data: bytes

    @property
    def n_tensors(self) -> int:
        return len(self.header)

    @property
    def layers(self) -> dict:
        return json.loads(self.metadata["layers"])


def verify_artifact(path: str | Path) -> Verified:
    """Check an artifact completely; raise ArtifactError saying which tensor (or part) failed."""
    return _verify_blob(Path(path).read_bytes(), str(path))


def _verify_blob(blob: bytes, source: str) -> Verified:
    header, _, data = _split(blob, source)
    meta = header.get("__metadata__", None) or {}
    if not isinstance(meta, dict):
        raise ArtifactError(f"{source}: __metadata__ is not a JSON object: corrupted")
    if meta.get("format") != FORMAT:
        raise ArtifactError(
            f"{source}: not a harmony-ref artifact (format = {meta.get('format')!r})"
        )
    if meta.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(
            f"{source}: format_version {meta.get('format_version')!r} is not "
            f"supported (this harmony-ref reads {FORMAT_VERSION!r})"
        )
    for key in (
        "policy",
        "layers",
        "tensor_sha256",
        "payload_sha256",
        "header_sha256",
        "n_heads",
        "max_seq_len",
        "tokenizer_json",
    ):
        if key not in meta:
            raise ArtifactError(f"{source}: manifest field {key!r} is missing")
    if _header_sha(header) != meta["header_sha256"]:
        raise ArtifactError(
            f"{source}: the header (manifest, tensor dtypes/shapes/offsets) failed "
            "its SHA-256 check: tampered or corrupted"
        )
    header = {k: v for k, v in header.items() if k != "__metadata__"}
    try:
        manifest = json.loads(meta["tensor_sha256"])
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{source}: manifest field 'tensor_sha256' is not JSON: {e}") from e
    missing = sorted(set(manifest) - set(header))
    extra = sorted(set(header) - set(manifest))
    if missing or extra:
        raise ArtifactError(
            f"{source}: tensors do not match the manifest: missing {missing}, "
            f"not in the manifest {extra}"
        )
    end_of_data = 0
    # Check in file order, so a truncation names the first tensor it cut.
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = info["data_offsets"]
        end_of_data = max(end_of_data, end)
        if end > len(data):
            raise ArtifactError(
                f"{source}: tensor {name!r} is truncated: its bytes run to offset "
                f"{end} of the data section, which has only {len(data)}"
            )
        dtype = DTYPES.get(info["dtype"])
        if dtype is None:
            raise ArtifactError(f"{source}: tensor {name!r} has unsupported dtype {info['dtype']}")
        if end - begin != int(np.prod(info["shape"])) * np.dtype(dtype).itemsize:
            raise ArtifactError(
                f"{source}: tensor {name!r}: {end - begin} bytes do not hold "
                f"{info['dtype']} {info['shape']}"
            )
        got = _sha(data[begin:end])
        if got != manifest[name]:
            raise ArtifactError(
                f"{source}: tensor {name!r} failed its SHA-256 check (got "
                f"{got[:16]}..., manifest says {manifest[name][:16]}...): tampered "
                "or corrupted"
            )
    if len(data) != end_of_data:
        raise ArtifactError(
            f"{source}: {len(data) - end_of_data} unexpected bytes after the last tensor"
        )
    if _sha(data) != meta["payload_sha256"]:
        raise ArtifactError(f"{source}: payload SHA-256 does not match the manifest")
    try:
        load_policy_text(meta["policy"], source)
    except ValueError as e:
        raise ArtifactError(str(e)) from e
    return Verified(source, _sha(blob), meta, header, data)


def load_policy_text(text: str, source: str):
    from harmony_ref._toml import loads
    from harmony_ref.quant.policy import policy_from_dict

    where = f"{source}: manifest 'policy'"
    return policy_from_dict(loads(text, where), where)


@dataclass(frozen=True)
class StoredLinear:
    """One Linear as the artifact stores it: its format, the stored weight, the float32 bias."""

    fmt: WeightFormat
    stored: object  # Int4Tensor, Int8Tensor or an (N, K) float16/float32 array
    bias: np.ndarray


@dataclass(frozen=True)
class Artifact:
    params: dict[str, np.ndarray]  # everything but the Linear weights, float32
    linears: dict[str, StoredLinear]
    policy: object
    verified: Verified


def load_artifact(path: str | Path) -> Artifact:
    """Verify, then rebuild the model's parameters and its stored Linears."""
    from safetensors.numpy import load

    blob = Path(path).read_bytes()
    v = _verify_blob(blob, str(path))
    tensors = load(blob)
    linears, used = {}, set()
    for name, info in v.layers.items():
        fmt = parse_format(info["format"], f"{path}: layers.{name}")
        w = name + ".weight"
        mine = {k: t for k, t in tensors.items() if k == w or k.startswith(w + ".")}
        stored = format_of(fmt).from_arrays(
            {k[len(w) :]: t for k, t in mine.items()}, tuple(info["shape"]), info.get("group_size")
        )
        used.update(mine)
        linears[name] = StoredLinear(fmt, stored, tensors[name + ".bias"])
    params = {k: t for k, t in tensors.items() if k not in used}
    policy = load_policy_text(v.metadata["policy"], str(path))
    return Artifact(params, linears, policy, v)
