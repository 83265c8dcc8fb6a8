"""Every asv benchmark in bench/ imports and is declared consistently, so a broken benchmark
fails CI rather than a nightly `asv run`: params match param_names, setup/teardown and every
benchmark method take one argument per parameter (plus setup_cache's result when there is one),
and every track_ method declares its `unit`."""

import importlib
import inspect
import pkgutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH_PREFIXES = ("time_", "timeraw_", "mem_", "peakmem_", "track_")


def _modules():
    sys.path.insert(0, str(ROOT))
    try:
        import bench
    finally:
        sys.path.remove(str(ROOT))
    return [f"bench.{m.name}" for m in pkgutil.iter_modules(bench.__path__)]


MODULES = _modules()


def _classes(module):
    for name, obj in vars(module).items():
        if (
            inspect.isclass(obj)
            and obj.__module__ == module.__name__
            and any(a.startswith(BENCH_PREFIXES) for a in dir(obj))
        ):
            yield name, obj


def _n_args(fn) -> int:
    sig = inspect.signature(fn)
    if any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values()):
        return -1  # *args takes anything
    return len(
        [
            p
            for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    )


def check_class(cls) -> list[str]:
    """Problems with one benchmark class, as asv would meet them (empty when fine)."""
    problems = []
    params = getattr(cls, "params", [])
    names = list(getattr(cls, "param_names", []))
    if (
        isinstance(params, (list, tuple))
        and params
        and all(isinstance(p, (list, tuple)) for p in params)
    ):
        n_params = len(params)
    elif isinstance(params, (list, tuple)) and params:
        n_params = 1  # asv: a flat list is one parameter
    else:
        n_params = 0
    if names and len(names) != n_params:
        problems.append(f"len(param_names)={len(names)} but params has {n_params} parameter lists")
    if (
        n_params
        and isinstance(params, (list, tuple))
        and n_params > 1
        and any(len(p) == 0 for p in params)
    ):
        problems.append("a parameter list is empty")
    extra = 1 if hasattr(cls, "setup_cache") else 0
    want = 1 + extra + n_params  # self, cache, params
    for attr in sorted(dir(cls)):
        if not (attr.startswith(BENCH_PREFIXES) or attr in ("setup", "teardown")):
            continue
        fn = getattr(cls, attr)
        if not callable(fn):
            continue
        got = _n_args(fn)
        if got != -1 and got != want:
            problems.append(
                f"{attr} takes {got} positional args, asv passes {want} "
                f"(self{', setup_cache result' if extra else ''}, {n_params} params)"
            )
        if attr.startswith("track_") and not getattr(fn, "unit", None):
            problems.append(f"{attr} has no `unit`")
    return problems


@pytest.mark.parametrize("module_name", MODULES)
def test_benchmark_module(module_name):
    module = importlib.import_module(module_name)
    classes = list(_classes(module))
    if module_name.split(".")[-1].startswith("bench_"):
        assert classes, f"{module_name} defines no benchmark class"
    problems = [f"{module_name}.{name}: {p}" for name, cls in classes for p in check_class(cls)]
    assert not problems, "\n".join(problems)


def test_checker_catches_mismatches():
    class Bad:
        params = ([1, 2], ["a"])
        param_names = ["n"]

        def setup(self, n):
            pass

        def time_x(self, n, m):
            pass

        def track_y(self, n, m):
            return 1

    problems = "\n".join(check_class(Bad))
    assert "len(param_names)=1 but params has 2" in problems
    assert "setup takes 2" in problems
    assert "track_y has no `unit`" in problems

    class Good:
        params = [1, 2]
        param_names = ["n"]

        def setup(self, n):
            pass

        def track_y(self, n):
            return n

        track_y.unit = "x"

    assert check_class(Good) == []


def test_asv_config():
    import json

    conf = json.loads((ROOT / "asv.conf.json").read_text())
    assert conf["benchmark_dir"] == "bench"
    assert conf["results_dir"] == "results/asv"
    assert conf["html_dir"] == "results/html"
    assert "results/html/" in (ROOT / ".gitignore").read_text()
