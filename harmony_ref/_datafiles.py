"""Shipped-or-user TOML data files (device profiles, quantization policies), read one way.

    data, source = read_toml("profile", "device/profiles", "harmony-flagship")  # shipped name
    data, source = read_toml("policy", "policies", "my-policy.toml")            # user path

A name that is not an existing path and does not end in .toml is looked up among the files
shipped in `harmony_ref/<folder>/`. `source` is what errors should name: the shipped file's path
inside the package, or the user's path. Every failure is a ValueError naming the file.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def shipped_names(folder: str) -> list[str]:
    """Names (file stems) of the .toml files shipped in harmony_ref/<folder>/."""
    root = resources.files("harmony_ref").joinpath(*folder.split("/"))
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".toml"))


def read_toml(kind: str, folder: str, name_or_path: str | Path) -> tuple[dict, str]:
    """(parsed TOML, source) for a shipped `kind` by name or a TOML file by path."""
    text = str(name_or_path)
    path = Path(text)
    if not (text.endswith(".toml") or path.exists()):
        shipped = resources.files("harmony_ref").joinpath(*folder.split("/"), f"{text}.toml")
        if not shipped.is_file():
            raise ValueError(f"unknown {kind} {text!r}: not a file, and not one of the shipped "
                             f"{folder.split('/')[-1]} {shipped_names(folder)}")
        source, raw = f"{folder}/{text}.toml", shipped.read_text()
    else:
        if not path.is_file():
            raise ValueError(f"{kind} file {path} does not exist or is not a file")
        try:
            source, raw = str(path), path.read_text()
        except OSError as e:
            raise ValueError(f"{path}: cannot read: {e}") from e
    try:
        return tomllib.loads(raw), source
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{source}: not valid TOML: {e}") from e
