"""The package's layering, checked on its source: every import in harmony_ref/ (module level and
inside functions, read with ast, never executed) points down the declared layer order or within
its own layer, no two modules import each other through any chain, no module loads the package's
own code by name (importlib, find_spec) except the CLI's command discovery, and only the TOML
loader imports tomllib/tomli. A synthetic package shows the checker catches what it claims to.

Layer order, bottom to top (a module may import its own layer and the layers below it):
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (layer, top-level names under harmony_ref/ it holds), bottom first. lab/ (the device-session
# stack) sits above device/ and below backends/, which drive it; job/ (the main job) above track/,
# whose records it writes, and below sweep/, which runs it. `sweep` (Dask sweeps over
# many configs, a later issue) sits between track/ and commands/: declared now, empty for now.
LAYERS = [
    (
        "shared",
        ("__init__", "_io", "_toml", "_schema", "_format", "_threads", "_cpus", "units", "metrics"),
    ),
    ("quant", ("quant",)),
    ("kernels", ("kernels",)),
    ("model", ("model",)),
    ("config", ("config",)),
    ("checkpoint", ("checkpoint",)),
    ("runtime", ("runtime",)),
    ("eval", ("eval",)),
    ("device", ("device",)),
    ("lab", ("lab",)),
    ("backends", ("backends",)),
    ("calibrate", ("calibrate",)),
    ("track", ("track",)),
    ("job", ("job",)),
    ("sweep", ("sweep",)),
    ("commands", ("commands",)),
    ("cli", ("cli", "__main__")),
]
__doc__ += "".join(
    f"    {i:2d}. {name}: {', '.join(tops)}\n" for i, (name, tops) in enumerate(LAYERS)
)

# Loading the package's own modules by name is allowed only where discovering them is the point.
DYNAMIC_IMPORT_ALLOWED = {"harmony_ref.cli"}  # commands are discovered, not listed
TOML_LOADER = "harmony_ref._toml"


def modules(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under root/package."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(path: Path, module: str, is_package: bool) -> list[tuple[str, int]]:
    """(imported dotted name, line) of every import statement anywhere in the file."""
    tree = ast.parse(path.read_text(), str(path))
    here = module if is_package else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing module's package, up level - 1
                anchor = here.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out += [(f"{base}.{a.name}", node.lineno) for a in node.names]
            out.append((base, node.lineno))
    return out


def resolve(name: str, known: dict[str, Path]) -> str | None:
    """The module of `known` an imported name refers to (a module, or a name inside one)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def layer_index(module: str, package: str, layers) -> int | None:
    top = module.split(".")[1] if "." in module else "__init__"
    for i, (_, tops) in enumerate(layers):
        if top in tops:
            return i
    return None


def edges(root: Path, package: str) -> dict[str, set[tuple[str, int]]]:
    known = modules(root, package)
    out: dict[str, set[tuple[str, int]]] = {m: set() for m in known}
    for module, path in known.items():
        for name, line in imports(path, module, path.name == "__init__.py"):
            target = resolve(name, known)
            if target is not None and target != module:
                out[module].add((target, line))
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer_problems(root: Path, package: str, layers) -> list[str]:
    """Every import cycle and every import against the layer order, one line each."""
    problems = []
    graph = edges(root, package)
    for module in sorted(graph):
        mine = layer_index(module, package, layers)
        if mine is None:
            problems.append(f"{module}: in no declared layer")
            continue
        for target, line in sorted(graph[module]):
            theirs = layer_index(target, package, layers)
            if theirs is not None and theirs > mine:
                problems.append(
                    f"{module}:{line} imports {target}: layer {layers[mine][0]} "
                    f"must not import from {layers[theirs][0]} (above it)"
                )
    for comp in cycles({m: {t for t, _ in es} for m, es in graph.items()}):
        problems.append("import cycle: " + " -> ".join(comp))
    return problems


def dynamic_self_imports(root: Path, package: str, allowed=frozenset()) -> list[str]:
    """importlib / __import__ / find_spec used on the package's own code, outside `allowed`."""
    problems = []
    for module, path in modules(root, package).items():
        if module in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any(n.split(".")[0] == "importlib" for n in names):
                    problems.append(f"{module}:{node.lineno}: imports importlib")
            elif isinstance(node, ast.Attribute) and node.attr in ("find_spec", "import_module"):
                problems.append(f"{module}:{node.lineno}: calls {node.attr}")
            elif isinstance(node, ast.Name) and node.id == "__import__":
                problems.append(f"{module}:{node.lineno}: calls __import__")
    return problems


def _importlib_resources_only(problem: str, root: Path) -> bool:
    """`from importlib import resources` reads shipped data files, not code: allowed."""
    module, line = problem.split(":")[0], int(problem.split(":")[1])
    path = modules(root, "harmony_ref")[module]
    return "from importlib import resources" in path.read_text().splitlines()[line - 1]


# --- the real package ------------------------------------------------------------------------


def test_no_import_cycle_and_every_import_points_down():
    assert layer_problems(ROOT, "harmony_ref", LAYERS) == []


def test_no_module_loads_its_own_package_by_name():
    problems = [
        p
        for p in dynamic_self_imports(ROOT, "harmony_ref", DYNAMIC_IMPORT_ALLOWED)
        if not _importlib_resources_only(p, ROOT)
    ]
    assert problems == []


def test_only_the_toml_loader_imports_a_toml_parser():
    offenders = [
        f"{m}:{line}"
        for m, path in modules(ROOT, "harmony_ref").items()
        if m != TOML_LOADER
        for name, line in imports(path, m, path.name == "__init__.py")
        if name.split(".")[0] in ("tomllib", "tomli")
    ]
    assert offenders == []


def test_every_package_is_declared_and_the_sweep_slot_is_between_track_and_commands():
    tops = {
        p.name if p.is_dir() else p.stem
        for p in (ROOT / "harmony_ref").iterdir()
        if (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py"
    }
    declared = {t for _, ts in LAYERS for t in ts}
    assert tops <= declared, sorted(tops - declared)
    order = [name for name, _ in LAYERS]
    assert order.index("track") < order.index("sweep") < order.index("commands")


# --- the checker itself, on a synthetic package ------------------------------------------------


def _package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "pkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


FAKE_LAYERS = [("low", ("__init__", "low")), ("high", ("high",))]


def test_checker_passes_a_clean_package(tmp_path):
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": "",
            "low/a.py": "import os\n",
            "high/__init__.py": "",
            "high/b.py": "from pkg.low import a\nfrom . import c\n",
            "high/c.py": "def f():\n    from ..low.a import os\n",
        },
    )
    assert layer_problems(root, "pkg", FAKE_LAYERS) == []
    assert dynamic_self_imports(root, "pkg") == []


def test_checker_catches_an_upward_import_inside_a_function(tmp_path):
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": "",
            "low/a.py": "def f():\n    from pkg.high.b import g\n    return g\n",
            "high/__init__.py": "",
            "high/b.py": "def g():\n    return 1\n",
        },
    )
    problems = layer_problems(root, "pkg", FAKE_LAYERS)
    assert problems == [
        "pkg.low.a:2 imports pkg.high.b: layer low must not import from high (above it)"
    ]


def test_checker_catches_a_cycle_through_a_relative_import(tmp_path):
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": "",
            "low/a.py": "from .b import x\ny = 1\n",
            "low/b.py": "x = 1\ndef later():\n    from pkg.low.c import z\n",
            "low/c.py": "from pkg.low import a\nz = 2\n",
        },
    )
    assert layer_problems(root, "pkg", FAKE_LAYERS) == [
        "import cycle: pkg.low.a -> pkg.low.b -> pkg.low.c"
    ]


def test_checker_catches_undeclared_modules_and_dynamic_self_loading(tmp_path):
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": "",
            "low/a.py": (
                "import importlib\nimport importlib.util\n"
                "def k():\n    return importlib.util.find_spec('pkg.high')\n"
            ),
            "stray.py": "",
        },
    )
    assert layer_problems(root, "pkg", FAKE_LAYERS) == ["pkg.stray: in no declared layer"]
    found = dynamic_self_imports(root, "pkg")
    assert "pkg.low.a:1: imports importlib" in found and "pkg.low.a:4: calls find_spec" in found


@pytest.mark.parametrize("text", ["import tomllib\n", "def f():\n    import tomli as t\n"])
def test_toml_imports_are_seen_anywhere(tmp_path, text):
    root = _package(tmp_path, {"__init__.py": "", "low/__init__.py": "", "low/a.py": text})
    path = root / "pkg" / "low" / "a.py"
    names = [n for n, _ in imports(path, "pkg.low.a", False)]
    assert any(n.split(".")[0] in ("tomllib", "tomli") for n in names)
