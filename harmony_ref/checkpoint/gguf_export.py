"""Export a decoder under a policy as a GGUF file llama.cpp runs: every Linear in its policy's
GGUF type, quantized by our bit-exact quantizers (quant/ggml.py), the source file's metadata
(architecture, tokenizer, chat template) copied, and a record of what made it.

    r = export_gguf("SmolLM2-135M.gguf", "q4_0", "out.gguf")   # -> GGUFExport
    r.manifest_path                                            # out.gguf.manifest.json

Tensors and types:
    blk.{i}.attn_q/k/v/output, ffn_gate/up/down.weight   the policy's format for the Linear
    output.weight (untied) / token_embd.weight           lm_head's format; a tied head is the
                                                         embedding, so token_embd takes it, and
                                                         the embedding lookup reads those values
                                                         (as llama.cpp's get_rows does)
    norms, biases                                        F32
Format -> GGUF type: fp32 F32, fp16 F16, q4_0 Q4_0, q4_1 Q4_1, q8_0 Q8_0, and q5_0 Q5_0, q4_k
Q4_K, q5_k Q5_K, q6_k Q6_K (quant/kquants.py; a K-quant's rows must be 256-multiples). Our own int8
(per-row scale) and int4-gNN (int8 zero point) have no GGUF type: they are refused in one line
naming the tensor and the nearest GGUF type (q8_0; q4_1 for asym, q4_0 for sym). So are a
policy's [prune] and [activations] tables (a GGUF tensor is only its weights).

Metadata: every key of the source file except GGUF.* and the ones a writer sets itself
(general.architecture, general.file_type, general.quantization_version), then
    general.file_type              the default format's LlamaFileType (when it has one)
    general.quantization_version   2 (ggml's QNT_VERSION)
    general.quantized_by           "harmony-ref <version>"
    general.harmony_ref.policy     the policy's name;  .policy_toml: its full TOML
    general.harmony_ref.version    harmony-ref's version;  .source: the source file's name
A source without tokenizer metadata (tokenizer.ggml.model and tokens) is refused: the file would
not run. Both paths (the file and `<out>.manifest.json`) are checked before any work. The file is
written to a temporary name in the target folder and read back, every Linear compared byte for
byte with what the quantizer produced; `<out>.manifest.json` (SHA-256 of the file and of every
tensor's bytes) is staged the same way, and the two are moved into place together
(_io.StagedOutputs): on any failure nothing is half-written, and a previous `<out>` and its
manifest stay exactly as they were.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harmony_ref._io import StagedOutputs, check_output_file
from harmony_ref.checkpoint.assets import sha256_file
from harmony_ref.checkpoint.gguf import (
    LAYER_TENSORS,
    LINEAR_FIELDS,
    PERMUTED_ARCHS,
    _open,
    permute_rope_rows,
    read_gguf,
)
from harmony_ref.kernels.formats import format_of
from harmony_ref.model.decoder import CheckpointError, layer_name
from harmony_ref.quant.formats import BY_GGUF_TYPE, FACTS
from harmony_ref.quant.policy import Policy, WeightFormat, load_policy

GGML_QNT_VERSION = 2
WRITER_KEYS = ("general.architecture", "general.file_type", "general.quantization_version")
TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.tokens")
MANIFEST_SUFFIX = ".manifest.json"
MANIFEST_VERSION = 1


def nearest_gguf_type(fmt: WeightFormat) -> str:
    """The GGUF type closest to a format GGUF cannot store (for the refusal message)."""
    return FACTS[fmt.facts.nearest_gguf].gguf_type.lower()


def gguf_type_for(fmt: WeightFormat, tensor: str, layer: str, source: str) -> str:
    """GGUF type name of `fmt`, or ValueError naming the tensor and the nearest GGUF type."""
    if fmt.facts.gguf_type is None:
        raise ValueError(
            f"--policy {source}: {tensor} ({layer}) is {fmt.name}, which GGUF has no "
            f"type for; the nearest GGUF type is {nearest_gguf_type(fmt)}"
        )
    return fmt.facts.gguf_type


@dataclass(frozen=True)
class GGUFExport:
    path: Path
    manifest_path: Path
    file_sha256: str
    tensors: int
    types: dict  # GGUF type -> tensor count
    nbytes: int


def _quantize(w: np.ndarray, fmt: WeightFormat):
    """(N, K) float32 -> the stored matrix (GGMLTensor, KQuantTensor, float16 or float32 array)."""
    return format_of(fmt).quantize(w, fmt.group_size)


def _tensor_bytes(stored) -> np.ndarray:
    """A float array as it is; a block container (GGMLTensor, KQuantTensor): its bytes."""
    return np.ascontiguousarray(stored) if isinstance(stored, np.ndarray) else stored.data


def _plan_tensors(weights, policy: Policy, source: str) -> list[tuple[str, str, object]]:
    """(GGUF name, GGUF type, stored matrix in the file's row order), in file order."""
    c = weights.config
    permuted = c.arch in PERMUTED_ARCHS
    # every type is checked before any tensor is quantized (a refusal costs nothing), blocks
    # first, in file order
    linears = []
    for i, lw in enumerate(weights.layers):
        for key, short in LINEAR_FIELDS.items():
            name, layer = f"blk.{i}.{LAYER_TENSORS[key]}", layer_name(i, short)
            fmt = policy.format_for(layer)
            linears.append((name, gguf_type_for(fmt, name, layer, source), fmt, lw, key))
    head_fmt = policy.format_for("lm_head")
    head_type = gguf_type_for(
        head_fmt,
        "output.weight" if weights.lm_head is not None else "token_embd.weight",
        "lm_head",
        source,
    )
    out = [("token_embd.weight", head_type, _quantize(weights.embed, head_fmt))]
    vectors = {}
    for i, lw in enumerate(weights.layers):
        for key, suffix in LAYER_TENSORS.items():
            a = getattr(lw, key)
            if a is not None and a.ndim == 1:
                if permuted and key == "bq":
                    a = permute_rope_rows(a, c.n_heads)
                if permuted and key == "bk":
                    a = permute_rope_rows(a, c.n_kv_heads)
                vectors[f"blk.{i}.{suffix}"] = np.ascontiguousarray(a, dtype=np.float32)
    for i in range(c.n_layers):
        for suffix in LAYER_TENSORS.values():
            name = f"blk.{i}.{suffix}"
            if name in vectors:
                out.append((name, "F32", vectors[name]))
        for name, gtype, fmt, lw, key in (x for x in linears if x[0].startswith(f"blk.{i}.")):
            stored = _quantize(getattr(lw, key), fmt)  # quantized in the in-memory row order
            if permuted and key in ("wq", "wk"):
                heads = c.n_heads if key == "wq" else c.n_kv_heads
                order = permute_rope_rows(np.arange(stored.shape[0]), heads)
                stored = stored[order] if isinstance(stored, np.ndarray) else stored.rows(order)
            out.append((name, gtype, stored))
    out.append(("output_norm.weight", "F32", np.ascontiguousarray(weights.final_norm, np.float32)))
    if weights.lm_head is not None:
        out.append(("output.weight", head_type, _quantize(weights.lm_head, head_fmt)))
    return out


def _copy_metadata(reader, writer) -> None:
    from gguf import GGUFValueType

    for key, f in reader.fields.items():
        if key.startswith("GGUF.") or key in WRITER_KEYS:
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == GGUFValueType.ARRAY else None
        value = f.contents()
        writer.add_key_value(key, value, vtype, sub_type=sub)


def export_gguf(model_path, policy, out, version: str | None = None) -> GGUFExport:
    """Write the decoder of the GGUF file `model_path` under `policy` to `out` (see the module
    docstring). Raises ValueError / CheckpointError in one line before anything is written."""
    import gguf

    from harmony_ref import __version__

    version = version or __version__
    model_path = Path(model_path)
    out = check_output_file(out, "--out")
    check_output_file(out.with_name(out.name + MANIFEST_SUFFIX), "--out's manifest")
    if out.resolve() == model_path.resolve():
        raise ValueError(f"--out {out}: is the source checkpoint itself")
    policy = load_policy(policy)
    src = policy.source
    if policy.prune is not None or policy.activations is not None:
        table = "prune" if policy.prune is not None else "activations"
        raise ValueError(
            f"--policy {src}: field '{table}': a GGUF file stores weights only; "
            "export a policy without [prune] / [activations]"
        )
    reader = _open(model_path)
    missing = [k for k in TOKENIZER_KEYS if k not in reader.fields]
    if missing:
        raise CheckpointError(
            f"--model {model_path}: metadata key {missing[0]} is missing: the "
            "exported file would have no tokenizer"
        )
    weights = read_gguf(model_path)
    spec = weights.config.to_spec()  # a mix (q4_k_m) resolved for this model's layers and rows
    policy = policy.bind(spec.weight_rows(), spec.n_layers)
    tensors = _plan_tensors(weights, policy, src)

    manifest_path = out.with_name(out.name + MANIFEST_SUFFIX)
    with StagedOutputs() as staged:  # the file and its manifest land together or not at all
        tmp = staged.stage(out)
        w = gguf.GGUFWriter(str(tmp), weights.config.arch)
        _copy_metadata(reader, w)
        ft = policy.default.facts.file_type
        if ft:
            w.add_file_type(int(getattr(gguf.LlamaFileType, ft)))
        w.add_quantization_version(GGML_QNT_VERSION)
        w.add_string("general.quantized_by", f"harmony-ref {version}")
        w.add_string("general.harmony_ref.policy", policy.name)
        w.add_string("general.harmony_ref.policy_toml", policy.to_toml())
        w.add_string("general.harmony_ref.version", version)
        w.add_string("general.harmony_ref.source", model_path.name)
        for name, gtype, stored in tensors:
            qt = getattr(gguf.GGMLQuantizationType, gtype)
            data = _tensor_bytes(stored)
            if not BY_GGUF_TYPE[gtype].quantized:  # a float array: gguf reads its dtype
                w.add_tensor(name, data)
            else:
                w.add_tensor(name, data, raw_dtype=qt)  # (N, bytes) uint8: gguf derives [K, N]
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        _check_read_back(tmp, tensors)
        digests = {
            name: hashlib.sha256(_tensor_bytes(s).tobytes()).hexdigest() for name, _, s in tensors
        }
        file_sha = sha256_file(tmp)
        nbytes = tmp.stat().st_size
        types: dict = {}
        for _, gtype, _ in tensors:
            types[gtype] = types.get(gtype, 0) + 1
        manifest = {
            "format_version": MANIFEST_VERSION,
            "file": out.name,
            "file_sha256": file_sha,
            "file_bytes": nbytes,
            "source": model_path.name,
            "policy": policy.name,
            "policy_toml": policy.to_toml(),
            "harmony_ref_version": version,
            "tensor_types": {name: gtype for name, gtype, _ in tensors},
            "tensor_sha256": digests,
        }
        staged.stage_text(manifest_path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        staged.commit()
    return GGUFExport(out, manifest_path, file_sha, len(tensors), types, nbytes)


def _check_read_back(path: Path, tensors) -> None:
    """The written file, read back by gguf's reader, holds exactly our bytes and types."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    got = {t.name: t for t in reader.tensors}
    for name, gtype, stored in tensors:
        t = got.get(name)
        if t is None or t.tensor_type.name != gtype:
            raise CheckpointError(f"{path}: tensor {name} did not read back as {gtype}")
        want = _tensor_bytes(stored)
        have = np.asarray(t.data)
        if have.tobytes() != want.tobytes():
            raise CheckpointError(f"{path}: tensor {name} read back with different bytes")


def verify_gguf_export(path) -> dict:
    """Check `path` against its manifest (file SHA-256); returns the manifest."""
    path = Path(path)
    mpath = path.with_name(path.name + MANIFEST_SUFFIX)
    if not mpath.is_file():
        raise CheckpointError(f"{path}: no manifest {mpath.name} beside it")
    manifest = json.loads(mpath.read_text())
    if sha256_file(path) != manifest["file_sha256"]:
        raise CheckpointError(f"{path}: SHA-256 does not match {mpath.name}")
    return manifest
