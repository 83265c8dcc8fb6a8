"""Atomic file writes: readers see the old file or the new one, never a part of one.

Used for run records, baselines, profiles, plans, caches and model artifacts alike, so a killed
run never leaves half a file and two runs never share a temporary name. Files are written with
the usual mode (0666 minus the umask: 0644 under a normal umask), not mkstemp's 0600. A writer
removes stale `.tmp-*` files that a killed writer left in its directory (older than
STALE_TMP_S, so a concurrent writer's live temporary file is never touched).

Every command checks its output paths before the work starts, one way (`check_output_file`,
`check_output_dir`): missing parent directories are created at write time, but a directory
where a file is needed, a file where a directory is needed, or a place this process cannot
write is a ValueError naming the flag and the path.

A command that writes several files that belong together (a GGUF and its manifest) stages them
(`StagedOutputs`): each is written to a temporary beside its target, and they are moved into
place only when all are written and checked; a failure before or during the move leaves every
file that was there before exactly as it was (the previous files are kept as hard links until
the move has succeeded, and put back if it has not), and a new file that had no predecessor is
removed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

TMP_PREFIX = ".tmp-"
STALE_TMP_S = 3600.0  # a temporary file untouched this long belongs to a writer that died


def _umask() -> int:
    """The process umask, read without changing it (os.umask would race other threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):  # pragma: no cover - not Linux
        pass
    mask = os.umask(0o022)  # pragma: no cover
    os.umask(mask)  # pragma: no cover
    return mask  # pragma: no cover


def _nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _check_parent(path: Path, what: str) -> None:
    anc = _nearest_existing(path.parent if path.parent != Path("") else Path("."))
    if not anc.is_dir():
        raise ValueError(f"{what} {path}: {anc} is a file, not a directory")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {path}: cannot write in {anc} (permission denied or read-only)")


def check_output_file(path: str | Path, what: str = "output") -> Path:
    """Before the work: `path` can be written as a file (see the module docstring)."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path}: is a directory; a file path is needed")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{what} {path}: the file is not writable")
    _check_parent(path, what)
    return path


def check_plot_file(path: str | Path, what: str = "--plot") -> Path:
    """Before the work: `path` names a .png file that can be written (every plot is a PNG; PNG
    bytes under another name open as nothing, or as garbage)."""
    if Path(path).suffix.lower() != ".png":
        raise ValueError(f"{what} {path}: must be a .png path (the plot is a PNG)")
    return check_output_file(path, what)


def check_output_dir(path: str | Path, what: str = "output directory") -> Path:
    """Before the work: files can be created in directory `path` (made if missing)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} {path}: is a file; a directory is needed")
    if path.is_dir():
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"{what} {path}: cannot write in it (permission denied or read-only)")
    else:
        _check_parent(path / "x", what)
    return path


def remove_stale_temps(directory: Path, older_than_s: float = STALE_TMP_S) -> int:
    """Delete `.tmp-*` files in `directory` not modified for `older_than_s`; returns how many."""
    now, n = time.time(), 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for e in entries:
        if not e.name.startswith(TMP_PREFIX):
            continue
        try:
            if e.is_file(follow_symlinks=False) and now - e.stat().st_mtime > older_than_s:
                os.unlink(e.path)
                n += 1
        except OSError:  # gone already, or another writer's: not ours to fail on
            pass
    return n


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
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=directory)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
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
    remove_stale_temps(path.parent)
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


class StagedOutputs:
    """Several outputs, all or nothing (see the module docstring).

        with StagedOutputs() as staged:
            tmp = staged.stage(out)                 # a temporary beside `out`, to write by name
            staged.stage_bytes(manifest, data)      # or written here
            ...check what was written...
            staged.commit()                         # all moved into place, or none
    Leaving the block without commit() (an exception) removes the temporaries."""

    def __init__(self) -> None:
        self._staged: list[tuple[Path, Path]] = []  # (temporary, target)

    def __enter__(self) -> StagedOutputs:
        return self

    def __exit__(self, *exc) -> None:
        self.discard()

    def stage(self, target: str | Path) -> Path:
        """An empty temporary file beside `target` (same suffix, the usual mode), for a writer
        that opens its output by name; moved to `target` by commit()."""
        target = Path(target)
        if any(t == target for _, t in self._staged):
            raise ValueError(f"output {target}: given twice")
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(target.parent)
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=target.suffix, dir=target.parent)
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 is for the temporary name only
        os.close(fd)
        self._staged.append((Path(tmp), target))
        return Path(tmp)

    def stage_bytes(self, target: str | Path, data: bytes) -> Path:
        tmp = self.stage(target)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return tmp

    def stage_text(self, target: str | Path, text: str) -> Path:
        return self.stage_bytes(target, text.encode("utf-8"))

    def commit(self) -> None:
        """Move every staged file into place; on any failure, put every previous file back."""
        kept: dict[Path, Path] = {}  # target -> a hard link (or copy) of its previous file
        placed: list[Path] = []
        try:
            for tmp, target in self._staged:
                with open(tmp, "rb+") as f:
                    os.fsync(f.fileno())
                if target.is_file():
                    kept[target] = _keep(target)
            for tmp, target in self._staged:
                os.replace(tmp, target)
                placed.append(target)
        except BaseException:
            for target in reversed(placed):
                if target in kept:
                    os.replace(kept.pop(target), target)
                else:
                    target.unlink(missing_ok=True)
            raise
        finally:
            for k in kept.values():
                k.unlink(missing_ok=True)
            self.discard()
        for d in {t.parent for _, t in self._staged}:
            _fsync_dir(d)
        self._staged = []

    def discard(self) -> None:
        for tmp, _ in self._staged:
            tmp.unlink(missing_ok=True)


def _keep(path: Path) -> Path:
    """A second name for `path`'s current contents in its directory (a hard link, or a copy
    where the filesystem has none), so that it can be put back."""
    name = path.parent / f"{TMP_PREFIX}kept-{os.getpid()}-{time.monotonic_ns()}{path.suffix}"
    try:
        os.link(path, name)
    except OSError:
        shutil.copy2(path, name)
    return name


def write_checked(path: str | Path, data: str | bytes, check=None) -> Path:
    """Write `data` to `path` atomically after `check(temporary_path)` has accepted it (e.g. a
    profile read back through its schema): a file that fails its check never replaces the
    previous one."""
    with StagedOutputs() as staged:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        tmp = staged.stage_bytes(path, raw)
        if check is not None:
            check(tmp)
        staged.commit()
    return Path(path)
