"""Fixtures shared by several test modules.

- `tiny` (module): a MiniLM built on the tiny random checkpoint of tests/fixtures/minilm/tiny.py.
  Module-scoped, not session-scoped: MiniLM caches quantized linears per policy, so each module
  starts from a fresh model as it did when every module defined its own copy of this fixture.
- `tiny_gguf` (module): the path of a tiny random decoder GGUF (tests/fixtures/decoder/tiny.py,
  llama, F32), written once per module.
- `tiny_programs` (session): ExecuTorch programs of tiny checkpoints at fp32, w4a8-g32 and int8
  (tests/fixtures/executorch.py), each exported once, on first use, for every test that needs
  it; skipped without the executorch extra, failed instead under
  HARMONY_REF_EXECUTORCH_TESTS=required.
- `_default_memory` (autouse): a test that ran an asv benchmark's setup (bench.common.pin_threads
  sets the benchmark process's allocator for steady timings) leaves this pytest process with
  glibc's and NumPy's default memory behaviour for the tests after it (RSS measurements).

The README's test command runs on every core (pytest-xdist, `-n auto --dist loadgroup`): each
module's tests stay on one worker (an `xdist_group` per module, so a module's fixtures load once),
and every test that uses `tiny_programs` shares one group, so the session's ExecuTorch exports
(20-47 s each) run once, not once per worker.

Tests under NUMERIC_PATHS are marked `numeric`: their expectations depend on float kernels'
results, so tests/emulated_cpus.py (`tox -e cpus`) runs them under every emulated x86-64 CPU. A
module elsewhere opts in with `pytestmark = pytest.mark.numeric`.
"""

from __future__ import annotations

import sys

import pytest

from tests.fixtures.minilm.tiny import make_tiny_model

# folders and files (relative to tests/) whose tests compute with the float kernels and BLAS
NUMERIC_PATHS = (
    "kernels/",
    "quant/",
    "runtime/",
    "eval/",
    "checkpoint/",
    "calibrate/",
    "backends/test_host_llm.py",
    "commands/test_check_runtime.py",
    "track/test_numerical.py",
    "test_readme_numbers.py",
    "test_kernels_bench.py",
)


@pytest.hookimpl(tryfirst=True)  # before xdist's loadgroup reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.nodeid.split("::")[0]
        if module.removeprefix("tests/").startswith(NUMERIC_PATHS):
            item.add_marker(pytest.mark.numeric)
        if not any(m.name == "xdist_group" for m in item.iter_markers()):
            shared = "tiny_programs" in getattr(item, "fixturenames", ())
            item.add_marker(pytest.mark.xdist_group("executorch-programs" if shared else module))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model, _, _ = make_tiny_model(tmp_path_factory.mktemp("tiny"))
    return model


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    from tests.fixtures.decoder.tiny import write_tiny_gguf

    path = tmp_path_factory.mktemp("decoder") / "tiny.gguf"
    write_tiny_gguf(path)
    return path


@pytest.fixture(scope="session")
def tiny_programs(tmp_path_factory):
    from tests.fixtures.executorch import TinyPrograms, needs_extra

    needs_extra()
    return TinyPrograms(tmp_path_factory.mktemp("programs"))


@pytest.fixture(autouse=True)
def _default_memory():
    yield
    common = sys.modules.get("bench.common")
    if common is not None:
        common.restore_memory()


@pytest.fixture(scope="session")
def microbench_profile(tmp_path_factory):
    """A host profile from `calibrate --method microbench --quick --no-e2e` (the older host
    method: its per-op [calibration], no runs), written once for the tests that read one."""
    from harmony_ref.cli import main

    prof = tmp_path_factory.mktemp("microbench") / "host.toml"
    argv = ["calibrate", "--method", "microbench", "--quick", "--no-e2e", "--repeats", "2"]
    assert main([*argv, "--out", str(prof)]) == 0
    return prof
