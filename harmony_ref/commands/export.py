"""`harmony-ref export`: a model quantized by a policy, written where a runtime can load it.

harmony-ref export --policy P out.safetensors              all-MiniLM-L6-v2, a verified
                                                           safetensors artifact (format:
                                                           harmony_ref/checkpoint/artifact.py)
harmony-ref export --model M --policy P --format gguf --out FILE
                                                           a decoder (smollm2-135m or a .gguf
                                                           file) as GGUF, each Linear in its
                                                           policy's GGUF type, with a SHA-256
                                                           manifest beside it
                                                           (checkpoint/gguf_export.py)
harmony-ref export --model M --policy P --format pte --out FILE [--max-context N]
                                                           a decoder as an ExecuTorch program
                                                           lowered to XNNPACK (fp32, int8,
                                                           w4a8-g32, w4a8-g128), with a
                                                           SHA-256 manifest beside it; needs the
                                                           executorch extra (runtime/pte.py)
"""

from __future__ import annotations

NAME = "export"
HELP = (
    "write a model quantized by --policy: all-MiniLM-L6-v2 as a verified safetensors "
    "artifact, or a decoder as GGUF (--format gguf) or an ExecuTorch program (--format pte)"
)
EXPORT_FORMATS = ("safetensors", "gguf", "pte")
DEFAULT_PTE_CONTEXT = 512  # the static KV cache's positions: accuracy's default --context


def add_arguments(p) -> None:
    from harmony_ref.commands._args import add_allow_unmatched
    from harmony_ref.commands._output import add_json_flag

    p.add_argument("--policy", required=True, help="shipped policy name or policy TOML path")
    p.add_argument(
        "--format",
        default="safetensors",
        choices=EXPORT_FORMATS,
        help="safetensors (MiniLM artifact, default), gguf (a decoder llama.cpp runs) or pte "
        "(a decoder ExecuTorch runs on XNNPACK; needs the executorch extra)",
    )
    p.add_argument(
        "--max-context",
        type=int,
        default=None,
        metavar="N",
        help=f"pte: positions of the program's static KV cache (default {DEFAULT_PTE_CONTEXT})",
    )
    p.add_argument(
        "--model",
        default=None,
        help="gguf: the source decoder, smollm2-135m or a .gguf file (its metadata "
        "and tokenizer are copied); pte: a shipped decoder, a .gguf file or a HF directory",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="FILE",
        help="output path (written atomically); or give it as the positional OUT",
    )
    p.add_argument(
        "out_positional",
        nargs="?",
        metavar="OUT",
        help="output .safetensors path (written atomically)",
    )
    add_allow_unmatched(p)
    add_json_flag(p)


def _out(args) -> str:
    if args.out and args.out_positional:
        raise ValueError(f"give the output once: --out {args.out} or {args.out_positional}")
    out = args.out or args.out_positional
    if not out:
        raise ValueError("--out FILE: the output path is missing")
    return out


def run(args) -> int:
    out = _out(args)
    if args.max_context is not None and args.format != "pte":
        raise ValueError(f"--max-context {args.max_context}: only --format pte takes it")
    if args.format == "gguf":
        return run_gguf(args, out)
    if args.format == "pte":
        return run_pte(args, out)
    if args.model is not None:
        raise ValueError(
            f"--model {args.model}: --format safetensors exports all-MiniLM-L6-v2 "
            "only; a decoder exports with --format gguf"
        )
    from pathlib import Path

    from harmony_ref._io import check_output_file
    from harmony_ref.checkpoint.artifact import export_artifact, verify_artifact
    from harmony_ref.commands._args import check_policies
    from harmony_ref.commands._output import print_json
    from harmony_ref.model.spec import get_spec
    from harmony_ref.runtime.minilm import real_model
    from harmony_ref.units import MB

    # the policy against the model before its weights are read (a first use downloads them)
    check_policies([args.policy], get_spec("all-minilm-l6"), args.allow_unmatched)
    check_output_file(out, "output")
    export_artifact(real_model(), args.policy, out)
    v = verify_artifact(out)  # what we wrote must pass what every load checks
    info = {
        "path": out,
        "policy": args.policy,
        "tensors": v.n_tensors,
        "file_mb": Path(out).stat().st_size / MB,
        "file_sha256": v.file_sha256,
        "payload_sha256": v.metadata["payload_sha256"],
        "format_version": v.metadata["format_version"],
    }
    if args.json:
        print_json(info)
    else:
        print(f"wrote {out}: {v.n_tensors} tensors, {info['file_mb']:.2f} MB, policy {args.policy}")
        print(f"payload sha256 {info['payload_sha256']}")
        print(f"file    sha256 {info['file_sha256']}")
    return 0


def run_gguf(args, out: str) -> int:
    from harmony_ref.checkpoint.gguf_export import export_gguf
    from harmony_ref.runtime.loader import resolve_model_path
    from harmony_ref.units import MB

    if args.model is None:
        raise ValueError("--format gguf: --model is missing (smollm2-135m or a .gguf file)")
    path = resolve_model_path(args.model)
    if path.is_dir():
        raise ValueError(
            f"--model {args.model}: --format gguf exports from a GGUF file (its "
            "tokenizer and metadata are copied); this is a directory"
        )
    from harmony_ref.commands._args import check_policies
    from harmony_ref.runtime.loader import checkpoint_spec

    # the same check accuracy and predict make: a pattern matching nothing is refused
    check_policies([args.policy], checkpoint_spec(args.model), args.allow_unmatched)
    r = export_gguf(path, args.policy, out)
    info = {
        "path": str(r.path),
        "manifest": str(r.manifest_path),
        "policy": args.policy,
        "source": str(path),
        "tensors": r.tensors,
        "tensor_types": r.types,
        "file_mb": r.nbytes / MB,
        "file_sha256": r.file_sha256,
    }
    types = ", ".join(f"{n} {t}" for t, n in sorted(r.types.items()))
    return _print_export(
        args,
        info,
        f"wrote {r.path}: {r.tensors} tensors ({types}), {info['file_mb']:.2f} MB, "
        f"policy {args.policy}",
    )


def _print_export(args, info: dict, headline: str) -> int:
    """A written file with a manifest: `info` as JSON, or the headline, manifest and SHA-256."""
    from harmony_ref.commands._output import print_json

    if args.json:
        print_json(info)
    else:
        print(headline)
        print(f"manifest {info['manifest']}")
        print(f"file sha256 {info['file_sha256']}")
    return 0


def run_pte(args, out: str) -> int:
    from harmony_ref.commands._args import check_policies
    from harmony_ref.runtime.loader import checkpoint_spec, resolve_model_path
    from harmony_ref.runtime.pte import export_pte, require_executorch
    from harmony_ref.units import MB

    if args.model is None:
        raise ValueError("--format pte: --model is missing (a shipped decoder or a checkpoint)")
    max_context = DEFAULT_PTE_CONTEXT if args.max_context is None else args.max_context
    if max_context < 1:
        raise ValueError(f"--max-context {max_context}: must be at least 1")
    version = require_executorch()  # before a first use downloads the model's weights
    resolve_model_path(args.model)
    check_policies([args.policy], checkpoint_spec(args.model), args.allow_unmatched)
    r = export_pte(args.model, args.policy, out, max_context)
    info = {
        "path": str(r.path),
        "manifest": str(r.manifest_path),
        "policy": args.policy,
        "model": args.model,
        "max_context": max_context,
        "linear_schemes": r.schemes,
        "file_mb": r.nbytes / MB,
        "file_sha256": r.file_sha256,
        "executorch": version,
    }
    schemes = ", ".join(f"{n} {s}" for s, n in sorted(r.schemes.items()))
    return _print_export(
        args,
        info,
        f"wrote {r.path}: ExecuTorch {version} XNNPACK program, Linears {schemes}, "
        f"{info['file_mb']:.2f} MB, policy {args.policy}, max context {max_context}",
    )
