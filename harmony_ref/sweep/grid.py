"""A sweep's grid: the axes (models, policies, profiles, runtimes, scenario values, KV dtypes), the parts
each point runs and the backend, from command-line lists or a sweep TOML file, checked before
any work starts; and its points, each keyed by a hash of its config and the code's version.

    grid = grid_from_toml("sweep.toml")            # or Grid(models=(...), policies=(...), ...)
    for point in grid.points(): point.key, point.config, point.error

A sweep TOML file:

    models = ["llama-3.2-1b", "qwen2.5-1.5b"]      # presets, spec TOML paths or checkpoints
    policies = ["int4-g128", "int8"]
    profiles = ["harmony-flagship", "harmony-lowend"]
    runtimes = ["llama.cpp-cpu", "executorch-xnnpack"]  # optional: default each profile's own
    parts = ["predicted", "accuracy"]              # of job/main.py's parts
    backend = "simulated"                          # optional
    [scenario]                                     # optional; each a list (or one value)
    prompt_tokens = [128, 512]
    new_tokens = [128]
    context_tokens = [2048]
    batch = [1]
    kv_dtype = ["fp16", "int8"]

    sessions = ["phones/mate60.toml", "phones/pixel8.toml"]  # optional: measured on these phones
                                                   # (a lab, sweep/lab.py; relative to this file)

Every name is resolved up front (a spec, a policy, a profile, a runtime, a part): a bad one is a
ValueError naming the file (or flag), the field and the value, and so is a runtime that runs on
none of the grid's profiles (its unit or NPU family is on none of them). A combination of valid
values that is not a valid config (a prompt longer than the context, QNN on a Dimensity among
phones that run it) is not bad input: it is a point that fails, never predicted, and the sweep
records it with its one-line message.

A point's `key` is a SHA-256 of its config's dict form, its parts, the contents of any spec,
policy or profile file given by path, and `code_version()` (a hash of the package's own files),
so a rerun of the same grid on the same code finds every point it already has, and any change
to the code or an input file computes the point again. `config_key` leaves the code out: it
names the point across code versions (the newest row per config_key is the one kept).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

from harmony_ref.config import KV_DTYPES, SCENARIO_FIELDS, RunConfig
from harmony_ref.job.main import part_names

SCENARIO_AXES = SCENARIO_FIELDS + ("kv_dtype",)
DEFAULT_SCENARIO = {
    "prompt_tokens": (512,),
    "new_tokens": (128,),
    "context_tokens": (2048,),
    "batch": (1,),
    "kv_dtype": ("fp16",),
}
GRID_FIELDS = (
    "models",
    "policies",
    "profiles",
    "runtimes",
    "parts",
    "backend",
    "scenario",
    "sessions",
)
# What each field of a sweep TOML means: docs/reference/grid.md is generated from this table
# (tools/docs_reference.py), and the build fails on a field of GRID_FIELDS it does not describe.
GRID_FIELD_DOCS = {
    "name": "accepted and not read: `--name` names the sweep and its folder",
    "models": "required list: model presets, spec TOML paths or checkpoints (.gguf, HF directory)",
    "policies": "required list: shipped policy names or policy TOML paths",
    "profiles": "required list: device profile names or profile TOML paths",
    "runtimes": "list of runtime profile names or runtime TOML paths, each run on every profile "
    "(default: each profile on its own default_runtime); a pair whose unit the SoC lacks fails",
    "parts": f"list of `harmony-ref run`'s parts: {', '.join(part_names())} "
    '(default ["predicted"])',
    "backend": '"simulated" (default) or "host"',
    "scenario": "table of axes, each a list or one value: prompt_tokens, new_tokens, "
    "context_tokens, batch, kv_dtype (defaults 512, 128, 2048, 1, fp16)",
    "sessions": "list of device session files, one per phone, relative to this file: each "
    "config measured on the phones whose device.profile it names (a lab, as `--sessions`)",
}
# Points one grid may hold: a point takes milliseconds (predicted) to minutes (host, accuracy),
# so 100,000 is already days of work; a larger grid is a typo in an axis, refused up front.
MAX_GRID_POINTS = 100_000


@dataclass(frozen=True)
class Point:
    key: str  # config + parts + input files + code version
    config_key: str  # config + parts + input files
    config: dict  # RunConfig.to_dict(), or the raw axes of a point that is not a valid config
    parts: tuple[str, ...]
    error: str = ""  # why this combination is not a valid config ("" when it is)
    phone: str = ""  # a lab point (sweep/lab.py): the serial of the phone that measures it


@dataclass(frozen=True)
class Grid:
    models: tuple[str, ...]
    policies: tuple[str, ...]
    profiles: tuple[str, ...]
    parts: tuple[str, ...] = ("predicted",)
    backend: str = "simulated"
    scenario: dict = field(default_factory=lambda: dict(DEFAULT_SCENARIO))
    source: str = "flags"  # what errors name: the TOML file, or "flags"
    runtimes: tuple[str, ...] = ()  # () = each profile on its own default_runtime
    sessions: tuple[str, ...] = ()  # a lab's phones (sweep/lab.py reads them), paths as resolved

    def __post_init__(self):
        check_grid(self)

    @property
    def size(self) -> int:
        n = len(self.models) * len(self.policies) * len(self.profiles) * len(self.runtime_axis)
        for axis in SCENARIO_AXES:
            n *= len(self.scenario[axis])
        return n

    @property
    def runtime_axis(self) -> tuple[str, ...]:
        """The runtimes each profile runs: the grid's, or ("",): each profile's own."""
        return self.runtimes or ("",)

    def points(self) -> list[Point]:
        """One Point per combination, in a stable order (models outermost)."""
        from harmony_ref.device.runtime import load_profile
        from harmony_ref.runtime.loader import resolve_model

        code = code_version()
        files = {
            v: file_digest(v)
            for v in (*self.models, *self.policies, *self.profiles, *self.runtime_axis)
        }
        out = []
        axes = [
            self.models,
            self.policies,
            self.profiles,
            self.runtime_axis,
            *(self.scenario[a] for a in SCENARIO_AXES),
        ]
        for model, policy, profile, runtime, *sc in itertools.product(*axes):
            values = dict(zip(SCENARIO_AXES, sc))
            error = ""
            try:
                spec, checkpoint = resolve_model(model)
                config = RunConfig.from_names(
                    spec,
                    policy,
                    profile=profile,
                    backend=self.backend,
                    **values,
                    checkpoint=checkpoint,
                    runtime=runtime,
                ).to_dict()
                load_profile(profile, runtime or None)  # a unit the SoC lacks: never predicted
            except ValueError as e:
                error = f"bad config: {e}"
                config = {
                    "model": model,
                    "policy": policy,
                    "profile": profile,
                    "backend": self.backend,
                    "scenario": {k: values[k] for k in SCENARIO_FIELDS},
                    "kv_dtype": values["kv_dtype"],
                    **({"runtime": runtime} if runtime else {}),
                }
            ident = {
                "config": config,
                "parts": sorted(self.parts),
                "files": [files[model], files[policy], files[profile]]
                + ([files[runtime]] if runtime else []),
            }
            config_key = _digest(ident)
            out.append(
                Point(_digest({**ident, "code": code}), config_key, config, self.parts, error)
            )
        return out

    def to_dict(self) -> dict:
        return {
            "models": list(self.models),
            "policies": list(self.policies),
            "profiles": list(self.profiles),
            **({"runtimes": list(self.runtimes)} if self.runtimes else {}),
            **({"sessions": list(self.sessions)} if self.sessions else {}),
            "parts": list(self.parts),
            "backend": self.backend,
            "scenario": {k: list(v) for k, v in self.scenario.items()},
        }


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:20]


def file_digest(value: str) -> str | None:
    """SHA-256 of a spec/policy/profile/runtime given as a file path (None for a shipped name: the
    shipped files are part of the code version)."""
    path = Path(value)
    if value.endswith(".toml") and path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return None


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """A hash of every file of the installed harmony_ref package (sources, shipped TOMLs, data):
    what a point's result can depend on besides its config."""
    import harmony_ref

    root = Path(harmony_ref.__file__).resolve().parent
    h = hashlib.sha256(harmony_ref.__version__.encode())
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


# --- checking and reading ---------------------------------------------------------------------

FLAG_OF = {
    "scenario.prompt_tokens": "--prompt",
    "scenario.new_tokens": "--new",
    "scenario.context_tokens": "--context",
    "scenario.batch": "--batch",
    "scenario.kv_dtype": "--kv-dtype",
}


def _fail(source: str, where: str, value, msg: str):
    if source == "flags":
        raise ValueError(f"{FLAG_OF.get(where, '--' + where)} {value!r}: {msg}")
    raise ValueError(f"{source}: field '{where}' = {value!r}: {msg}")


def check_grid(grid: Grid) -> None:
    """Every axis non-empty and every name resolvable; a ValueError naming source/field/value."""
    from harmony_ref.device.runtime import load_profile
    from harmony_ref.job.main import part_names
    from harmony_ref.quant.policy import load_policy
    from harmony_ref.runtime.loader import resolve_model

    src = grid.source
    for where, values, load in (
        ("models", grid.models, resolve_model),
        ("policies", grid.policies, load_policy),
        ("profiles", grid.profiles, load_profile),
        ("parts", grid.parts, None),
    ):
        if not values:
            _fail(src, where, list(values), "must list at least one")
        if len(set(values)) != len(values):
            _fail(src, where, list(values), "lists a value twice")
        for v in values:
            if not isinstance(v, str) or not v:
                _fail(src, where, v, "must be a non-empty string")
            if load is None:
                if v not in part_names():
                    _fail(src, where, v, f"not a part; parts are {part_names()}")
                continue
            try:
                load(v)
            except ValueError as e:  # its message names `v` already
                msg = str(e)
                _fail(src, where, v, msg[len(v) + 2 :] if msg.startswith(f"{v}: ") else msg)
    _check_runtimes(grid)
    from harmony_ref.config import BACKENDS

    if grid.backend not in BACKENDS:
        _fail(src, "backend", grid.backend, f"must be one of {list(BACKENDS)}")
    if grid.backend == "command":
        _fail(
            src,
            "backend",
            grid.backend,
            "a sweep runs simulated or host backends (a command "
            "backend needs one command line per phone: use `harmony-ref run`)",
        )
    extra = set(grid.scenario) - set(SCENARIO_AXES)
    if extra:
        _fail(
            src,
            f"scenario.{sorted(extra)[0]}",
            grid.scenario[sorted(extra)[0]],
            f"not a scenario axis; axes are {list(SCENARIO_AXES)}",
        )
    for axis in SCENARIO_AXES:
        values = grid.scenario.get(axis)
        if not values:
            _fail(src, f"scenario.{axis}", values, "must list at least one value")
        for v in values:
            if axis == "kv_dtype":
                if v not in KV_DTYPES:
                    _fail(src, f"scenario.{axis}", v, f"must be one of {list(KV_DTYPES)}")
                continue
            lo = 0 if axis == "new_tokens" else 1
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                _fail(src, f"scenario.{axis}", v, f"must be an integer >= {lo}")
        if len(set(values)) != len(values):  # a point twice is one row computed twice
            dup = next(v for i, v in enumerate(values) if v in values[:i])
            _fail(src, f"scenario.{axis}", dup, "is listed twice")
    if grid.size > MAX_GRID_POINTS:
        _fail(
            src,
            "scenario",
            {a: len(v) for a, v in grid.scenario.items()},
            f"the grid has {grid.size:,} points, more than {MAX_GRID_POINTS:,} "
            "(sweep/grid.py MAX_GRID_POINTS: days of work; split it)",
        )
    _check_policies_fit_models(grid)


def _check_runtimes(grid: Grid) -> None:
    """Each runtime loads and runs on at least one of the grid's profiles (one that runs on none
    is a typo or a wrong grid, refused with the first profile's reason); a pair that does not
    run leaves its points failing with the reason."""
    from harmony_ref.device.runtime import load_profile, load_runtime

    src = grid.source
    if len(set(grid.runtimes)) != len(grid.runtimes):
        _fail(src, "runtimes", list(grid.runtimes), "lists a value twice")
    for rt in grid.runtimes:
        if not isinstance(rt, str) or not rt:
            _fail(src, "runtimes", rt, "must be a non-empty string")
        try:
            load_runtime(rt)
        except ValueError as e:
            _fail(src, "runtimes", rt, str(e))
        reasons = []
        for profile in grid.profiles:
            try:
                load_profile(profile, rt)
                break
            except ValueError as e:
                reasons.append(str(e))
        else:
            _fail(src, "runtimes", rt, f"runs on none of the grid's profiles: {reasons[0]}")


def _check_policies_fit_models(grid: Grid) -> None:
    """A policy that fits none of the grid's models (a typo'd layer pattern, a block past the
    end) is bad input, refused before any point runs; one that fits some models and not others
    leaves those points failing with the reason."""
    from harmony_ref.quant.policy import load_policy, unmatched
    from harmony_ref.runtime.loader import resolve_model

    specs = [resolve_model(m)[0] for m in grid.models]
    for name in grid.policies:
        policy = load_policy(name)
        problems = [unmatched(policy, s.weight_rows(), s.n_layers, repr(s.name)) for s in specs]
        if all(problems):
            _fail(grid.source, "policies", name, problems[0][0])


def split_list(text: str, flag: str, kind=str) -> tuple:
    """'a,b' -> ('a', 'b'); ints for kind=int; a ValueError naming the flag and value."""
    items = tuple(s.strip() for s in (text or "").split(",") if s.strip())
    if not items:
        raise ValueError(f"{flag} {text!r}: give a comma-separated list")
    if kind is int:
        try:
            return tuple(int(s) for s in items)
        except ValueError:
            raise ValueError(f"{flag} {text!r}: must be comma-separated integers") from None
    return items


def grid_from_toml(path: str | Path) -> Grid:
    from harmony_ref._toml import loads

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: sweep grid file does not exist")
    data = loads(path.read_text(), str(path))
    src = str(path)
    unknown = sorted(set(data) - set(GRID_FIELDS) - {"name"})
    if unknown:
        from harmony_ref._format import did_you_mean

        _fail(
            src,
            unknown[0],
            data[unknown[0]],
            f"not a grid field{did_you_mean(unknown[0], GRID_FIELDS)}; fields are "
            f"{list(GRID_FIELDS)}",
        )
    for key in ("models", "policies", "profiles"):
        if key not in data:
            _fail(src, key, None, "missing")
    sc = data.get("scenario", {})
    if not isinstance(sc, dict):
        _fail(src, "scenario", sc, "must be a table")
    scenario = dict(DEFAULT_SCENARIO)
    for k, v in sc.items():
        scenario[k] = tuple(v) if isinstance(v, list) else (v,)

    def listed(key, default=None):
        v = data.get(key, default)
        if isinstance(v, str):
            return (v,)
        if not isinstance(v, list):
            _fail(src, key, v, "must be a list of strings")
        return tuple(v)

    backend = data.get("backend", "simulated")
    sessions = tuple(str(path.parent / s) for s in listed("sessions", []))
    return Grid(
        listed("models"),
        listed("policies"),
        listed("profiles"),
        listed("parts", ["predicted"]),
        backend,
        scenario,
        source=src,
        runtimes=listed("runtimes", []),
        sessions=sessions,
    )
