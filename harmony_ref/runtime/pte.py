"""ExecuTorch programs (.pte) of our decoders: exported from the checkpoint's weights, lowered to
XNNPACK, written with a manifest, loaded back and run through ExecuTorch's Python runtime.

    r = export_pte("smollm2-135m", "w4a8-g32", "out.pte", max_context=512)   # -> PteExport
    prog = PteProgram.load("out.pte")       # checks the manifest, the file and the version
    logits = prog.prefill(token_ids)        # (V,): the last position's
    logits = prog.prefill(token_ids, all_logits=True)   # (T, V); prog.decode(tok) -> (V,)

Export follows ExecuTorch's own LLM flow (pytorch/executorch examples/models/llama,
export_llama): the module (runtime/torch_decoder.py: the same math as runtime/llama.py's
LlamaRef, a static KV cache of `max_context` positions with the flow's custom update_cache /
custom_sdpa ops), quantized per the policy as the flow's `quantize` does
(torch_decoder.quantize_for_policy), `torch.export` with the token count dynamic
(1 .. max_context), `to_edge_transform_and_lower(partitioner=[XnnpackPartitioner()])`,
`to_executorch()`. The program has two methods over one KV cache (the flow's multimethod export
with share_mutable_buffers), both taking (tokens (1, T) int64, input_pos (T,) int64):
`forward` returns the last position's logits (1, 1, V), what ExecuTorch's runner reads and all
that generation computes; `forward_all` returns every position's (1, T, V), what the corpus
scoring (eval/lm.py) reads. A prefill through either leaves the cache the other decodes from.

Written as gguf_export.py writes GGUF: both paths (`out` and `<out>.manifest.json`) checked
before any work, the program staged beside its target, loaded back through the runtime and run on
two tokens (a program the runtime cannot load never lands), then the file and its manifest moved
into place together (_io.StagedOutputs). The manifest holds the file's SHA-256, the model and
its source file's SHA-256, the policy and the scheme of every Linear, max_context, and the
torch / torchao / ExecuTorch versions that built it.

Loading refuses in one line naming the file: no manifest beside it, a file whose SHA-256 is not
the manifest's, a file that is not an ExecuTorch program (its flatbuffer identifier, bytes 4-8,
is not ET12; ET followed by other digits: a program of another schema version), a manifest of
another format_version, or one built by another ExecuTorch version than the one installed (the
manifest's versions.executorch: the runtime that executes the program; torch and torchao only
built it, and are recorded for the record's sake).

Needs the `executorch` extra (torch CPU, executorch, torchao): `require_executorch()` says so in
one line where it is missing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harmony_ref._io import StagedOutputs, check_output_file
from harmony_ref.checkpoint.assets import sha256_file

MANIFEST_SUFFIX = ".manifest.json"
PTE_MAGIC = b"ET12"  # the program schema's flatbuffer file_identifier (bytes 4..8)
PTE_FORMAT_VERSION = 2  # of the manifest below (1: one method, every position's logits)
METHODS = {"forward": "last", "forward_all": "all"}  # method -> the positions it returns
EXTRA_HINT = "pip install 'harmony-ref[executorch]' (docs/how-to/executorch.md)"


def require_executorch() -> str:
    """ExecuTorch's version; ValueError in one line when the extra is not installed."""
    try:
        import torch  # noqa: F401
        from executorch.version import __version__
    except ImportError as e:
        raise ValueError(f"ExecuTorch is not installed ({e.name} missing): {EXTRA_HINT}") from e
    return __version__


def manifest_path(path) -> Path:
    p = Path(path)
    return p.with_name(p.name + MANIFEST_SUFFIX)


@dataclass(frozen=True)
class PteExport:
    path: Path
    manifest_path: Path
    file_sha256: str
    nbytes: int
    schemes: dict  # scheme -> how many Linears


def _versions() -> dict:
    import torch
    import torchao
    from executorch.version import __version__

    return {"executorch": __version__, "torch": torch.__version__, "torchao": torchao.__version__}


def export_pte(model: str, policy: str, out, max_context: int) -> PteExport:
    """Export `model` (a shipped name or a checkpoint path) under `policy` to `out`."""
    require_executorch()
    out = Path(out)
    check_output_file(out, "--out")
    check_output_file(manifest_path(out), "--out's manifest")
    from harmony_ref.quant.policy import load_policy
    from harmony_ref.runtime.loader import (
        SHIPPED_MODELS,
        checkpoint_config,
        load_decoder,
        model_label,
        resolve_model_path,
    )
    from harmony_ref.runtime.torch_decoder import TorchDecoder, pte_plan, quantize_for_policy

    pol = load_policy(policy)
    config = checkpoint_config(model)
    pte_plan(config, pol)  # refused here, before any weight is read
    if not 1 <= max_context <= config.max_positions:
        raise ValueError(
            f"--max-context {max_context}: must be 1..{config.max_positions} (the checkpoint's)"
        )
    weights, _ = load_decoder(model)
    module = TorchDecoder(weights, max_context).eval()
    plan = quantize_for_policy(module, pol)
    data = _lower(module, max_context)
    source = resolve_model_path(model)
    manifest = {
        "format": "harmony-ref pte manifest",
        "format_version": PTE_FORMAT_VERSION,
        # a shipped name, or the checkpoint's absolute path: what accuracy scores against
        "model": model if model in SHIPPED_MODELS else str(source.resolve()),
        "model_label": model_label(model, weights),
        "source": source.name,
        "source_sha256": sha256_file(source) if source.is_file() else "",
        "policy": pol.name,
        "linears": {n: {"scheme": s, "group_size": g} for n, (s, g) in plan.items()},
        "max_context": int(max_context),
        "vocab_size": int(weights.config.vocab_size),
        "bos_id": weights.config.bos_id,
        "inputs": "tokens (1, T) int64, input_pos (T,) int64; T in 1..max_context",
        "outputs": "forward: logits (1, 1, V) float32 of the last position; forward_all: "
        "(1, T, V), every position; one KV cache shared by both",
        "methods": sorted(METHODS),
        "attention": "llama::update_cache + llama::custom_sdpa (executorch extension/llm)",
        "backend": "XnnpackPartitioner",
        "versions": _versions(),
    }
    with StagedOutputs() as staged:  # the program and its manifest land together or not at all
        tmp = staged.stage_bytes(out, data)
        prog = PteProgram(tmp, manifest)
        got = prog.prefill([int(weights.config.bos_id or 0)] * 2, all_logits=True)
        if got.shape != (2, weights.config.vocab_size) or not np.isfinite(got).all():
            raise ValueError(f"--out {out}: the written program ran but its logits are wrong")
        manifest["file_sha256"] = sha256_file(tmp)
        manifest["file_bytes"] = len(data)
        staged.stage_text(manifest_path(out), json.dumps(manifest, indent=1, sort_keys=True))
        staged.commit()
    schemes: dict[str, int] = {}
    for s, _ in plan.values():
        schemes[s] = schemes.get(s, 0) + 1
    return PteExport(out, manifest_path(out), manifest["file_sha256"], len(data), schemes)


def _method_module(decoder, last_only: bool):
    """One method of the program: `decoder`'s logits of the last or of every position. Every
    method holds the decoder under one name, so its KV cache buffers have one name to share."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.decoder = decoder

        def forward(self, tokens, input_pos):
            return self.decoder.logits(tokens, input_pos, last_only=last_only)

    return Logits().eval()


def _lower(module, max_context: int) -> bytes:
    """torch.export of both methods -> XNNPACK -> the program's bytes."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import (
        EdgeCompileConfig,
        ExecutorchBackendConfig,
        to_edge_transform_and_lower,
    )
    from executorch.exir.passes import MemoryPlanningPass
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass
    from torch.export import Dim

    seq = Dim("seq", min=1, max=max_context)
    example = (torch.zeros((1, 2), dtype=torch.long), torch.arange(2, dtype=torch.long))
    with torch.no_grad():
        eps = {
            name: torch.export.export(
                _method_module(module, rows == "last"),
                example,
                dynamic_shapes=({1: seq}, {0: seq}),
            )
            for name, rows in METHODS.items()
        }
        edge = to_edge_transform_and_lower(
            eps,
            partitioner=[XnnpackPartitioner()],
            compile_config=EdgeCompileConfig(_check_ir_validity=False),
        )
        # the KV cache is one allocation both methods read and write (export_llama's
        # multimethod share_mutable_buffers). A causal custom_sdpa reads only the rows
        # update_cache wrote before it, so the cache's initial contents are never read and the
        # program stores none; a windowed layer (Gemma 3's local ones) attends over every row
        # under a -inf mask, where an uninitialized NaN would still reach the output (0 x NaN),
        # so such a program starts its cache as zeros, as export_llama does, stored once per
        # method (2 x the cache's bytes in the file: 47.2 MB for SmolLM2 at 512 positions)
        windowed = any(getattr(m, "windowed", False) for m in module.modules())
        init = [InitializedMutableBufferPass(["k_cache", "v_cache"])] if windowed else []
        config = ExecutorchBackendConfig(
            passes=init,
            memory_planning_pass=MemoryPlanningPass(share_mutable_buffers=True),
            emit_mutable_buffer_names=True,
        )
        return edge.to_executorch(config).buffer


def read_manifest(path) -> dict:
    """The manifest of the program at `path`, checked against the file and this ExecuTorch."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--model {p}: no such file")
    with open(p, "rb") as f:
        head = f.read(8)
    if head[4:6] == PTE_MAGIC[:2] and head[6:8].isdigit() and head[4:8] != PTE_MAGIC:
        raise ValueError(
            f"--model {p}: an ExecuTorch program of schema {head[4:8].decode()}, this ExecuTorch "
            f"reads {PTE_MAGIC.decode()}: export it again"
        )
    if head[4:8] != PTE_MAGIC:
        raise ValueError(f"--model {p}: not an ExecuTorch program (no ET12 identifier)")
    mp = manifest_path(p)
    if not mp.is_file():
        raise ValueError(f"--model {p}: no manifest {mp.name} beside it (export --format pte)")
    try:
        manifest = json.loads(mp.read_text())
        built = manifest["versions"]["executorch"]
        want = manifest["file_sha256"]
        fmt = manifest["format_version"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"--model {p}: manifest {mp.name} is unreadable ({e})") from e
    if fmt != PTE_FORMAT_VERSION:
        raise ValueError(
            f"--model {p}: manifest {mp.name} has format_version {fmt!r}, this harmony-ref "
            f"reads {PTE_FORMAT_VERSION}: export it again"
        )
    try:  # before the file is hashed: without the extra nothing can run it
        have = require_executorch()
    except ValueError as e:
        raise ValueError(f"--model {p}: {e}") from e
    if sha256_file(p) != want:
        raise ValueError(f"--model {p}: its SHA-256 is not its manifest's (changed after export)")
    if built != have:
        raise ValueError(
            f"--model {p}: built by ExecuTorch {built}, this is {have}: export it again"
        )
    return manifest


class PteProgram:
    """A loaded .pte decoder, with the interface eval/lm.py scores (`name`, `reset`, `prefill`,
    `decode`): positions advance from 0 until reset()."""

    def __init__(self, path, manifest: dict, methods=tuple(METHODS)):
        """`methods`: the ones loaded, all at once here: each loaded method's XNNPACK delegates
        pack the weights again (the runner loads `forward` alone: 1,509 MB peak RSS against
        2,047 MB with both, fp32 SmolLM2), and loading a method initializes the shared KV
        cache, so none can be loaded later without losing the positions written."""
        # the llama:: kernels (update_cache, custom_sdpa) registered before the program loads
        from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401
        from executorch.runtime import Runtime

        self.path, self.manifest = Path(path), manifest
        self.max_context = int(manifest["max_context"])
        self.name = f"executorch {manifest['policy']}"
        self.program = Runtime.get().load_program(self.path)
        self.methods = {name: self.program.load_method(name) for name in methods}
        self.pos = 0

    @classmethod
    def load(cls, path) -> PteProgram:
        return cls(path, read_manifest(path))

    def reset(self) -> None:
        self.pos = 0  # stale cache rows beyond pos are masked, and rewritten before they are read

    def forward(self, tokens, all_logits: bool = False) -> np.ndarray:
        """The logits (T, V) of every position, or (1, V) of the last one."""
        import torch

        ids = torch.as_tensor(np.asarray(tokens, dtype=np.int64)).reshape(1, -1)
        t = ids.shape[1]
        if self.pos + t > self.max_context:
            raise ValueError(
                f"context full: {self.pos} + {t} tokens > the program's max_context "
                f"{self.max_context}"
            )
        pos = torch.arange(self.pos, self.pos + t, dtype=torch.long)
        name = "forward_all" if all_logits else "forward"
        if name not in self.methods:
            raise ValueError(f"{self.path}: method {name} was not loaded")
        (logits,) = self.methods[name].execute((ids, pos))
        self.pos += t
        return logits[0].numpy()  # (T, V) or (1, V)

    def prefill(self, tokens, all_logits: bool = False) -> np.ndarray:
        logits = self.forward(tokens, all_logits)
        return logits if all_logits else logits[-1]

    def decode(self, token: int) -> np.ndarray:
        return self.forward([token])[0]


def program_for_scoring(path, context: int) -> tuple[str, PteProgram]:
    """(the checkpoint the program at `path` was exported from, the program) for `accuracy`:
    ValueError in one line when the checkpoint is gone or changed, or `context` is longer than
    the program's static cache."""
    from harmony_ref.runtime.loader import resolve_model_path

    manifest = read_manifest(path)
    model = manifest["model"]
    try:
        source = resolve_model_path(model)
    except ValueError as e:
        raise ValueError(f"--model {path}: its checkpoint {model} is gone ({e})") from e
    if source.is_file() and sha256_file(source) != manifest["source_sha256"]:
        raise ValueError(f"--model {path}: its checkpoint {model} changed since the export")
    if context > manifest["max_context"]:
        raise ValueError(
            f"--context {context}: longer than {path}'s static KV cache "
            f"({manifest['max_context']} positions; export --max-context)"
        )
    return model, PteProgram(path, manifest)
