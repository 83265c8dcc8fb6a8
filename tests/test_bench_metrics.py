"""The asv benchmarks measure what they say, the way the gate judges it.

- Directions: asv takes every benchmark as lower-is-better. Every track_ declares the record
  metric it follows (bench/common.tracks) and a lower-is-better form of it; the form must fit the
  direction the gate's records give that metric (results/baseline.json, the gate's committed
  baseline of a full run, plus a prediction on a calibrated host profile for host_model_mape_pct).
- Parameters: every parameter of every benchmark changes what is measured: varying it alone
  changes a track_'s value, or the inputs a time_/peakmem_ benchmark's setup prepares (or the
  timed call reads the parameter itself).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import json
import math
import pkgutil
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import bench  # noqa: E402
from bench.common import LOWER_FORMS  # noqa: E402

sys.path.remove(str(ROOT))

BENCH_PREFIXES = ("time_", "timeraw_", "mem_", "peakmem_", "track_")
MODULES = [
    f"bench.{m.name}" for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_")
]


def benchmark_classes():
    for name in MODULES:
        module = importlib.import_module(name)
        for cls_name, cls in vars(module).items():
            if (
                inspect.isclass(cls)
                and cls.__module__ == name
                and any(a.startswith(BENCH_PREFIXES) for a in dir(cls))
            ):
                yield f"{name.split('.')[-1]}.{cls_name}", cls


CLASSES = dict(benchmark_classes())


def tracks_of(cls):
    return {a: getattr(cls, a) for a in dir(cls) if a.startswith("track_")}


# --- directions -----------------------------------------------------------------------------


def gate_directions() -> dict[str, str]:
    """Metric name -> direction, as the gate's run records carry them."""
    from harmony_ref.backends.simulated import SimulatedDevice
    from harmony_ref.config import RunConfig
    from harmony_ref.device.runtime import load_profile
    from harmony_ref.device.soc import CalibrationInfo

    baseline = json.loads((ROOT / "results" / "baseline.json").read_text())
    out = {name: m["direction"] for name, m in baseline["metrics"].items()}
    calibrated = dataclasses.replace(
        load_profile("harmony-flagship"),
        calibration=CalibrationInfo(held_out_per_op_mape_pct=7.0, n_fit=8, n_held_out=4),
    )
    for m in SimulatedDevice(calibrated).predict(RunConfig.from_names()):
        assert out.setdefault(m.name, m.direction) == m.direction, m.name
    return out


def direction_problems(cls, directions: dict[str, str]) -> list[str]:
    problems = []
    for name, fn in tracks_of(cls).items():
        metric, form = getattr(fn, "metric", "?"), getattr(fn, "form", None)
        if form not in LOWER_FORMS:
            problems.append(f"{name}: no lower-is-better form declared (bench.common.tracks)")
            continue
        if metric is None:
            if getattr(fn, "direction", "") != "lower":
                problems.append(f"{name}: follows no record metric and is not lower-is-better")
            continue
        if metric not in directions:
            problems.append(f"{name}: follows {metric!r}, which no run record has")
            continue
        want = "lower" if form == "same" else "higher"
        if directions[metric] != want:
            problems.append(
                f"{name}: {metric} is {directions[metric]}-is-better in the gate's "
                f"records, but drawn in form {form!r} (for {want}-is-better)"
            )
    return problems


@pytest.fixture(scope="module")
def directions():
    return gate_directions()


@pytest.mark.parametrize("name", sorted(n for n, c in CLASSES.items() if tracks_of(c)))
def test_every_track_is_lower_is_better_as_the_gate_judges_its_metric(name, directions):
    assert not direction_problems(CLASSES[name], directions)


def test_direction_check_catches_a_higher_is_better_track(directions):
    from bench.common import tracks

    class Upside:
        @tracks("decode_tokens_per_s", unit="tokens/s")
        def track_decode_tokens_per_s(self):
            return 23.3

        def track_undeclared(self):
            return 1.0

        @tracks("decode_step_ms", "reciprocal", unit="1/ms")
        def track_inverted_twice(self):
            return 1.0

    problems = "\n".join(direction_problems(Upside, directions))
    assert "decode_tokens_per_s is higher-is-better" in problems
    assert "track_undeclared: no lower-is-better form" in problems
    assert "decode_step_ms is lower-is-better" in problems


def test_lower_is_better_refuses_a_metric_whose_direction_changed():
    from bench.common import lower_is_better
    from harmony_ref.metrics import Metric

    assert lower_is_better(Metric("x_speedup_x", 4.0, "x", "higher"), "reciprocal") == 0.25
    assert lower_is_better(Metric("recall", 77.5, "%", "higher"), "missing_pct") == 22.5
    with pytest.raises(ValueError, match="recorded higher-is-better"):
        lower_is_better(Metric("tokens_per_s", 23.3, "tokens/s", "higher"), "same")


# --- parameters -----------------------------------------------------------------------------


def fingerprint(obj, depth: int = 0):
    """What a benchmark's setup prepared, comparable across parameter values."""
    if depth > 3:
        return type(obj).__name__
    if isinstance(obj, np.ndarray):
        return (
            "array",
            obj.shape,
            str(obj.dtype),
            hashlib.sha1(np.ascontiguousarray(obj).tobytes()).hexdigest(),
        )
    if isinstance(obj, (str, int, float, bool, type(None))):
        return obj
    if isinstance(obj, (list, tuple)):
        return tuple(fingerprint(o, depth + 1) for o in obj)
    if isinstance(obj, dict):
        return tuple(sorted((str(k), fingerprint(v, depth + 1)) for k, v in obj.items()))
    if callable(obj) and hasattr(obj, "__code__"):
        cells = tuple(fingerprint(c.cell_contents, depth + 1) for c in obj.__closure__ or ())
        return ("fn", obj.__module__, obj.__code__.co_name, obj.__code__.co_firstlineno, cells)
    if hasattr(obj, "__dict__"):
        return (type(obj).__name__, fingerprint(vars(obj), depth + 1))
    return repr(obj)


def prepared(cls, args, cache=()):
    """(state after setup incl. the thread count, {track_: value}) for one parameter set;
    `cache`: (setup_cache's result,) for classes that have one."""
    import numba

    bench = cls()
    if hasattr(bench, "setup"):
        bench.setup(*cache, *args)
    state = (fingerprint(vars(bench)), numba.get_num_threads())
    values = {name: getattr(bench, name)(*cache, *args) for name in tracks_of(cls)}
    return state, values


def param_problems(cls) -> list[str]:
    params = list(getattr(cls, "params", []))
    if params and not isinstance(params[0], (list, tuple)):
        params = [params]
    names = list(getattr(cls, "param_names", [])) or [f"param{i}" for i in range(len(params))]
    problems = [
        f"{n} has one value: it cannot change what is measured"
        for n, values in zip(names, params)
        if len(values) < 2
    ]
    if problems or not params:
        return problems
    base = [values[0] for values in params]
    cache = (cls().setup_cache(),) if hasattr(cls, "setup_cache") else ()
    state0, values0 = prepared(cls, base, cache)
    timed = [a for a in dir(cls) if a.startswith(BENCH_PREFIXES) and not a.startswith("track_")]
    for i, name in enumerate(names):
        changed_state, changed = False, set()
        for value in params[i][1:]:
            state, vals = prepared(cls, base[:i] + [value] + base[i + 1 :], cache)
            changed_state |= state != state0
            changed |= {t for t, v in vals.items() if not _same(v, values0[t])}
        problems += [f"{t} is the same for every {name}" for t in values0 if t not in changed]
        blind = [t for t in timed if not reads_argument(getattr(cls, t), i + 1 + len(cache))]
        if blind and not changed_state:
            problems.append(
                f"{name}: setup prepares the same inputs for every value and "
                f"{', '.join(blind)} ignores it (would time the same thing)"
            )
    return problems


def reads_argument(fn, position: int) -> bool:
    """Whether fn's body reads its positional argument `position` (0 is self)."""
    import dis

    arg = fn.__code__.co_varnames[position]
    for ins in dis.get_instructions(fn):
        if ins.opname.startswith("LOAD_FAST"):
            names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
            if arg in names:
                return True
    return False


def _same(a, b) -> bool:
    return a == b or (
        isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=1e-12)
    )


@pytest.fixture
def tiny_minilm(tiny, monkeypatch, tmp_path):
    """The MiniLM and the decoder benchmarks on tiny random checkpoints (the real ones are
    measured by asv, not here)."""
    from harmony_ref.job import main as job
    from harmony_ref.runtime import minilm
    from tests.fixtures.decoder.tiny import write_tiny_gguf

    monkeypatch.setattr(minilm, "real_model", lambda *a, **k: tiny)
    gguf = tmp_path / "tiny.gguf"
    write_tiny_gguf(gguf)
    monkeypatch.setattr(job, "ACCURACY_MODEL", str(gguf))
    monkeypatch.setattr(job, "ACCURACY_CONTEXT", 32)
    monkeypatch.setenv("HARMONY_REF_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize("name", sorted(n for n in CLASSES if getattr(CLASSES[n], "params", None)))
def test_every_parameter_changes_what_is_measured(name, tiny_minilm, monkeypatch):
    import bench.common as bc
    from harmony_ref.kernels import matmul

    # A relative track's value is a timing: what this asks is whether the parameter changes it,
    # not how precisely it is timed, so one short round (QuantizeLlama7BMlp's five rounds on a
    # 4096 x 11008 matrix took 22-30 s of CI for it).
    timed = bc._relative_samples
    monkeypatch.setattr(
        bc, "_relative_samples", lambda t, b, rounds, block_s: timed(t, b, 1, min(block_s, 0.01))
    )

    if name == "bench_kernels.MatmulPaths" and len(matmul.SUPPORTED_ISAS) < 2:
        pytest.skip("this CPU runs one matmul path (no AVX2): MatmulPaths has nothing to compare")
    try:
        problems = param_problems(CLASSES[name])
    except NotImplementedError as e:  # asv's skip: an optional input (llama.cpp's libraries)
        pytest.skip(f"{name}: {e}")
    assert not problems


def test_parameter_check_catches_a_parameter_that_does_nothing():
    class KvCache:  # the bug this test was written for: the size ignored `context`
        params = (["fp16", "int8"], [512, 2048])
        param_names = ["kv_dtype", "context"]

        def setup(self, kv_dtype, context):
            self.bytes_per_token = 2 if kv_dtype == "fp16" else 1
            self.cache = np.zeros((4096, self.bytes_per_token))

        def track_kv_cache_mb(self, kv_dtype, context):
            return self.cache.nbytes / 1e6

        def time_read(self, kv_dtype, context):
            self.cache.sum()

    class OneValue:
        params = ([4096],)
        param_names = ["width"]

        def time_x(self, width):
            pass

    problems = "\n".join(param_problems(KvCache))
    assert "track_kv_cache_mb is the same for every context" in problems
    assert (
        "context: setup prepares the same inputs for every value and time_read ignores" in problems
    )
    assert "kv_dtype" not in problems
    assert param_problems(OneValue) == ["width has one value: it cannot change what is measured"]
