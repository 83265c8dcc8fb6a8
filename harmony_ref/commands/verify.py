"""`harmony-ref verify FILE`: check an exported artifact (SHA-256 of the header, of every tensor
and of the payload; lengths, manifest); exit 0 when it is intact, 1 when it is refused, naming
the tensor or the part that failed."""

from __future__ import annotations

NAME = "verify"
HELP = "verify an exported artifact's SHA-256 manifest (exit 1 and the failing tensor if refused)"


def add_arguments(p) -> None:
    from harmony_ref.commands._output import add_json_flag

    p.add_argument("path", help=".safetensors artifact written by `harmony-ref export`")
    add_json_flag(p)


def run(args) -> int:
    import sys
    from pathlib import Path

    from harmony_ref.checkpoint.artifact import ArtifactError, verify_artifact
    from harmony_ref.commands._output import print_json

    if not Path(args.path).is_file():
        raise ValueError(f"{args.path}: no such file")
    try:
        v = verify_artifact(args.path)
    except ArtifactError as e:
        if args.json:
            print_json({"path": args.path, "ok": False, "error": str(e)})
        print(f"REFUSED: {e}", file=sys.stderr)
        return 1
    formats = {}
    for info in v.layers.values():
        formats[info["format"]] = formats.get(info["format"], 0) + 1
    if args.json:
        print_json(
            {
                "path": args.path,
                "ok": True,
                "tensors": v.n_tensors,
                "file_sha256": v.file_sha256,
                "payload_sha256": v.metadata["payload_sha256"],
                "layers_per_format": formats,
            }
        )
    else:
        print(
            f"OK {args.path}: {v.n_tensors} tensors verified (SHA-256 of the header, each tensor and the payload), "
            f"layers: " + ", ".join(f"{n} {f}" for f, n in formats.items())
        )
        print(f"file sha256 {v.file_sha256}")
    return 0
