"""`harmony-ref export --policy P out.safetensors`: all-MiniLM-L6-v2 quantized by a policy, with
a SHA-256 manifest (format: harmony_ref/checkpoint/artifact.py)."""

from __future__ import annotations

NAME = "export"
HELP = "write all-MiniLM-L6-v2 quantized by --policy to a verified safetensors artifact"


def add_arguments(p) -> None:
    from harmony_ref.commands._output import add_json_flag

    p.add_argument("--policy", required=True, help="shipped policy name or policy TOML path")
    p.add_argument("out", help="output .safetensors path (written atomically)")
    add_json_flag(p)


def run(args) -> int:
    from pathlib import Path

    from harmony_ref.commands._output import print_json
    from harmony_ref.runtime.minilm import real_model
    from harmony_ref.checkpoint.artifact import export_artifact, verify_artifact
    from harmony_ref.units import MB

    from harmony_ref._io import check_output_file

    check_output_file(args.out, "output")
    export_artifact(real_model(), args.policy, args.out)
    v = verify_artifact(args.out)  # what we wrote must pass what every load checks
    info = {"path": args.out, "policy": args.policy, "tensors": v.n_tensors,
            "file_mb": Path(args.out).stat().st_size / MB, "file_sha256": v.file_sha256,
            "payload_sha256": v.metadata["payload_sha256"],
            "format_version": v.metadata["format_version"]}
    if args.json:
        print_json(info)
    else:
        print(f"wrote {args.out}: {v.n_tensors} tensors, {info['file_mb']:.2f} MB, "
              f"policy {args.policy}")
        print(f"payload sha256 {info['payload_sha256']}")
        print(f"file    sha256 {info['file_sha256']}")
    return 0
