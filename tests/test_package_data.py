"""Every data file the package reads ships in a non-editable install: each non-Python file under
harmony_ref/ matches a [tool.setuptools.package-data] glob (a runtime profile folder once did
not, and `pip install . && harmony-ref run` failed its fidelity part)."""

import fnmatch
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "harmony_ref"


def test_every_data_file_is_package_data():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = conf["tool"]["setuptools"]["package-data"]["harmony_ref"]
    data = [
        p.relative_to(PKG).as_posix()
        for p in PKG.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    ]
    assert data, "no data files found"
    missing = [f for f in data if not any(fnmatch.fnmatch(f, g) for g in globs)]
    assert not missing, f"not in pyproject.toml package-data: {missing}"
