"""Atomic file writes: readers see the old file or the new one, never a part of one.

Used for run records, baselines, profiles, plans, caches and model artifacts alike, so a killed
run never leaves half a file and two runs never share a temporary name.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _write_temp(directory: Path, data: bytes) -> Path:
    """A fully written, fsynced temporary file in `directory` (same filesystem as the target),
    under a name no other writer can be given."""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def _link_exclusive(tmp: Path, path: Path) -> None:
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError:
        # No hard links on this filesystem: claim the name with O_EXCL, then rename over it.
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        os.replace(tmp, path)
        return
    tmp.unlink()


def write_bytes_atomic(path: str | Path, data: bytes, overwrite: bool = True) -> Path:
    """Write `data` to `path` atomically.

    overwrite=False refuses to replace an existing file (FileExistsError): the temporary file
    is hard-linked to the final name, which fails atomically when the name is taken."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _write_temp(path.parent, data)
    try:
        if overwrite:
            os.replace(tmp, path)
        else:
            _link_exclusive(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def write_text_atomic(path: str | Path, text: str, overwrite: bool = True) -> Path:
    """UTF-8 `text` to `path` atomically (see write_bytes_atomic)."""
    return write_bytes_atomic(path, text.encode("utf-8"), overwrite)
