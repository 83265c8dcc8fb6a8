"""The one TOML loader: every TOML the package reads (device profiles, model specs, policies, gate
tolerances, a policy inside an artifact's manifest) is parsed here, with `tomllib` on Python 3.11+
and `tomli` (the same parser, a declared dependency) on 3.10.

    data = loads(text, "results/plan.toml")                                 # errors name the source
    data, source = read_toml("profile", "device/profiles", "harmony-flagship")  # shipped, by name
    data, source = read_toml("policy", "policies", "my-policy.toml")            # or a user's path

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


def loads(text: str, source: str) -> dict:
    """Parsed TOML, or a ValueError naming `source`."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{source}: not valid TOML: {e}") from e


def shipped_names(folder: str) -> list[str]:
    """Names (file stems) of the .toml files shipped in harmony_ref/<folder>/."""
    root = resources.files("harmony_ref").joinpath(*folder.split("/"))
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".toml"))


# the command that lists a folder's shipped files, named by an unknown-name error
LIST_COMMANDS = {"device/profiles": "`harmony-ref profiles`"}


def read_toml(kind: str, folder: str, name_or_path: str | Path) -> tuple[dict, str]:
    """(parsed TOML, source) for a shipped `kind` by name or a TOML file by path."""
    text = str(name_or_path)
    path = Path(text)
    if not (text.endswith(".toml") or path.exists()):
        shipped = resources.files("harmony_ref").joinpath(*folder.split("/"), f"{text}.toml")
        if not shipped.is_file():
            from harmony_ref._format import did_you_mean

            names = shipped_names(folder)
            listed = ", ".join(names)
            if len(listed) > 90:  # the error stays one short line; the list has its command
                listed = (
                    f"{len(names)} of them: {LIST_COMMANDS.get(folder, f'harmony_ref/{folder}/')}"
                )
            raise ValueError(
                f"unknown {kind} {text!r}{did_you_mean(text, names)}: not a file, "
                f"and not one of the shipped {folder.split('/')[-1]} ({listed})"
            )
        source, raw = f"{folder}/{text}.toml", shipped.read_text()
    else:
        if not path.is_file():
            raise ValueError(f"{kind} file {path} does not exist or is not a file")
        try:
            source, raw = str(path), path.read_bytes().decode("utf-8")
        except OSError as e:
            raise ValueError(f"{path}: cannot read: {e}") from e
        except UnicodeDecodeError as e:
            what = "a GGUF file" if path.read_bytes()[:4] == b"GGUF" else "not UTF-8 text"
            raise ValueError(
                f"{kind} file {path}: {what} (byte {e.start}), not a {kind} TOML"
            ) from None
    return loads(raw, source), source


def reference(source: str, folder: str, name: str) -> str:
    """What `read_toml` takes to read a file again: the stem of a shipped file
    (`policies/int4-g128.toml` -> `int4-g128`), a user's path as given, or `name` for an object
    built in memory (source "<memory>")."""
    stem = Path(source).stem
    if source == f"{folder}/{stem}.toml":
        return stem
    return name if source == "<memory>" else source
