"""The run config: one point to measure, and the one type every layer above model/ passes around.

    cfg = RunConfig.from_names(model="llama-3.2-3b", policy="int4-g128", profile="harmony-flagship",
                               prompt_tokens=512, new_tokens=128)
    record_config = cfg.to_dict()         # what a run record stores
    RunConfig.from_dict(record_config)    # == cfg

A RunConfig is a model spec and a quantization policy (resolved: `spec`, `policy`), a `Scenario`,
whether the op graph is fused, the KV cache dtype, the device profile it runs on (a shipped name
or a profile TOML path, as given: a backend loads it), the runtime profile that runs on it
(`runtime`: a shipped name or a runtime TOML path; "" is the profile's own `default_runtime`)
and the backend that measures it (simulated, host, command or executorch, with `backend_options`
such as a command backend's command line or the executorch backend's program).

`Scenario` says what the app does: process a prompt of `prompt_tokens`, then generate
`new_tokens`, with a KV cache allocated for `context_tokens` positions (what a phone runtime
reserves up front; prompt + generated tokens must fit in it), for `batch` requests at once. The
first `prefix_tokens` of the prompt (a shared system prompt, default 0) may already be in the KV
cache: prefill then runs only the rest, attending over the whole prompt.

The dict form (`to_dict` / `from_dict`) is the serialisation run records hold: the model and
policy by the name or path they load from, the scenario as a table, `fused`, `kv_dtype` and
`runtime` only when they differ from their defaults (as in records written before they existed; so is the
scenario's `prefix_tokens`). A policy with `[prune]` / `[activations]` tables adds
`compression = {"prune": {...}, "activations": {...}}` (every field of each, quant/compress.py's
to_dict), so a record says what was pruned and how activations were calibrated without its
policy file; from_dict reads the policy file and checks the two agree. Every problem
with one is a ValueError naming the source and the field.

This module sits above model/ and quant/ (it resolves specs and policies), below everything that
runs a config.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from harmony_ref._toml import reference
from harmony_ref.model.spec import SPECS_FOLDER, ModelSpec, get_spec, spec_from_dict
from harmony_ref.quant.kv import KV_DTYPES
from harmony_ref.quant.policy import POLICIES_FOLDER, Policy, check_applies, load_policy

BACKENDS = ("simulated", "host", "command", "executorch")
CONFIG_FIELDS = ("model", "policy", "profile", "scenario", "backend")
SCENARIO_FIELDS = ("prompt_tokens", "new_tokens", "context_tokens", "batch")
DEFAULT_PROFILE = "harmony-flagship"
# Requests decoded at once: phone runtimes batch a handful (one user, a few agents); 1,024 bounds
# the serving simulation's and the op graph's work with room to spare.
MAX_BATCH = 1024


@dataclass(frozen=True)
class Scenario:
    prompt_tokens: int = 512
    new_tokens: int = 128
    context_tokens: int = 2048
    batch: int = 1
    prefix_tokens: int = 0  # of the prompt, already in the KV cache (prefix reuse)

    def __post_init__(self):
        for name, lo in (
            ("prompt_tokens", 1),
            ("new_tokens", 0),
            ("context_tokens", 1),
            ("batch", 1),
            ("prefix_tokens", 0),
        ):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ValueError(f"scenario: field '{name}' = {v!r}: must be an int >= {lo}")
        if self.batch > MAX_BATCH:
            raise ValueError(
                f"scenario: field 'batch' = {self.batch:,}: at most {MAX_BATCH:,} "
                "requests at once (config.py MAX_BATCH: phone runtimes batch a few)"
            )
        if self.prompt_tokens + self.new_tokens > self.context_tokens:
            raise ValueError(
                f"scenario: prompt_tokens + new_tokens = {self.prompt_tokens} + {self.new_tokens} "
                f"exceeds context_tokens = {self.context_tokens} (the KV cache would overflow)"
            )
        if self.prefix_tokens >= self.prompt_tokens:
            raise ValueError(
                f"scenario: field 'prefix_tokens' = {self.prefix_tokens}: must be less "
                f"than prompt_tokens = {self.prompt_tokens} (the new part is >= 1 token)"
            )

    @property
    def new_prompt_tokens(self) -> int:
        """Prompt tokens prefill must run: those past the cached prefix."""
        return self.prompt_tokens - self.prefix_tokens


def fitting_context(prompt_tokens: int, new_tokens: int = Scenario.new_tokens) -> int:
    """The context of a command's scenario when it takes no --context: the default one
    (Scenario.context_tokens), or the prompt and the new tokens when they need more."""
    return max(Scenario.context_tokens, prompt_tokens + new_tokens)


@dataclass(frozen=True)
class RunConfig:
    spec: ModelSpec
    policy: Policy
    scenario: Scenario = field(default_factory=Scenario)
    fused: bool = True
    kv_dtype: str = "fp16"  # KV cache: fp16, or int8 with one float32 scale per head per token
    profile: str = DEFAULT_PROFILE  # the device: a shipped profile name or a profile TOML path
    backend: str = "simulated"
    backend_options: tuple[tuple[str, str], ...] = ()  # e.g. (("command", ...), ("format", ...))
    # The decoder checkpoint the spec was derived from (a shipped name such as smollm2-135m, a
    # .gguf path or an HF directory), or "" for a spec preset: the host backend then runs the
    # real model and the accuracy part scores it. The record stores the spec inline beside it.
    checkpoint: str = ""
    # the policy may name layers, blocks or group sizes the model does not have (quant/policy.py
    # check_applies); off, such a policy is refused before any work
    allow_unmatched: bool = False
    # the runtime profile on the device (device/runtimes/*.toml name or a path); "" = the
    # profile's own default_runtime. device/runtime.py load_profile merges the two
    runtime: str = ""

    def __post_init__(self):
        # a mix policy (q4_k_m) resolved for this model's layers and rows (quant/policy.py bind)
        object.__setattr__(
            self, "policy", self.policy.bind(self.spec.weight_rows(), self.spec.n_layers)
        )
        if self.kv_dtype not in KV_DTYPES:
            raise ValueError(
                f"config: field 'kv_dtype' = {self.kv_dtype!r}: must be one of {list(KV_DTYPES)}"
            )
        if self.backend not in BACKENDS:
            raise ValueError(
                f"config: field 'backend' = {self.backend!r}: must be one of {list(BACKENDS)}"
            )
        if not (isinstance(self.profile, str) and self.profile):
            raise ValueError(
                f"config: field 'profile' = {self.profile!r}: must be a non-empty string"
            )
        if not isinstance(self.runtime, str):
            raise ValueError(f"config: field 'runtime' = {self.runtime!r}: must be a string")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.backend_options):
            raise ValueError(
                f"config: field 'backend_options' = {self.backend_options!r}: "
                "must be (name, value) strings"
            )
        # TTFT is the first generated token: a decoder scenario with nothing to generate has none
        # (and would report a TTFT longer than its end-to-end time).
        if self.spec.is_decoder and self.scenario.new_tokens < 1:
            raise ValueError(
                f"config: new_tokens = {self.scenario.new_tokens}: {self.spec.name} is "
                "a decoder, it must generate at least 1 token"
            )
        # A decoder's KV cache holds context_tokens positions: no more than the model was made for
        # (the number says what the cache would cost: 10^7 positions of a 3B model are a TB).
        if self.spec.is_decoder and self.scenario.context_tokens > self.spec.max_positions:
            s = self.spec
            kv_tb = (
                2
                * s.n_layers
                * s.kv_dim
                * 2
                * self.scenario.context_tokens
                * self.scenario.batch
                / 1e12
            )
            raise ValueError(
                f"config: context_tokens = {self.scenario.context_tokens} exceeds {s.name}'s "
                f"max_positions = {s.max_positions} (that context is {kv_tb:,.3g} TB of KV cache "
                "in FP16)"
            )
        # An encoder runs one forward pass over the prompt; new/context tokens do not apply.
        if not self.spec.is_decoder and self.scenario.prompt_tokens > self.spec.max_positions:
            raise ValueError(
                f"config: prompt_tokens = {self.scenario.prompt_tokens} exceeds {self.spec.name}'s "
                f"max_positions = {self.spec.max_positions}"
            )
        check_applies(
            self.policy,
            self.spec.weight_rows(),
            self.spec.n_layers,
            self.spec.name,
            self.allow_unmatched,
        )

    @classmethod
    def from_names(
        cls,
        model: str = "llama-3.2-3b",
        policy: str = "int4-g128",
        prompt_tokens: int = 512,
        new_tokens: int = 128,
        context_tokens: int = 2048,
        batch: int = 1,
        fused: bool = True,
        kv_dtype: str = "fp16",
        profile: str = DEFAULT_PROFILE,
        backend: str = "simulated",
        backend_options: dict[str, str] | None = None,
        prefix_tokens: int = 0,
        checkpoint: str = "",
        allow_unmatched: bool = False,
        runtime: str = "",
    ) -> RunConfig:
        """A config from names (or TOML paths) of the model spec and policy. A checkpoint's
        model passes its spec (DecoderConfig.to_spec()) as `model` and its name as
        `checkpoint` (runtime/loader.py's checkpoint_spec does both)."""
        return cls(
            get_spec(model),
            load_policy(policy),
            Scenario(prompt_tokens, new_tokens, context_tokens, batch, prefix_tokens),
            fused,
            kv_dtype,
            profile,
            backend,
            tuple((backend_options or {}).items()),
            checkpoint,
            allow_unmatched,
            runtime,
        )

    @property
    def options(self) -> dict[str, str]:
        return dict(self.backend_options)

    @property
    def label(self) -> str:
        s = self.scenario
        return (
            f"{self.spec.name}/{self.policy.name}/p{s.prompt_tokens}-n{s.new_tokens}"
            f"-c{s.context_tokens}-b{s.batch}"
            + (f"-x{s.prefix_tokens}" if s.prefix_tokens else "")
            + ("" if self.fused else "/unfused")
            + ("" if self.kv_dtype == "fp16" else f"/kv-{self.kv_dtype}")
        )

    def with_spec(self, spec: ModelSpec) -> RunConfig:
        """The same point on another model (the host measures a width-scaled copy)."""
        return dataclasses.replace(self, spec=spec)

    def to_dict(self) -> dict:
        """The serialisation run records hold (see the module docstring)."""
        s = self.scenario
        out: dict[str, Any] = {
            "model": self.checkpoint or reference(self.spec.file, SPECS_FOLDER, self.spec.name),
            "policy": reference(self.policy.source, POLICIES_FOLDER, self.policy.name),
            "profile": self.profile,
            "backend": self.backend,
            "scenario": {k: getattr(s, k) for k in SCENARIO_FIELDS},
        }
        if s.prefix_tokens:
            out["scenario"]["prefix_tokens"] = s.prefix_tokens
        if self.backend_options:
            out["backend_options"] = dict(self.backend_options)
        if not self.fused:
            out["fused"] = False
        if self.kv_dtype != "fp16":
            out["kv_dtype"] = self.kv_dtype
        if self.checkpoint:
            out["model_spec"] = spec_to_dict(self.spec)
        comp = compression_dict(self.policy)
        if comp:
            out["compression"] = comp
        if self.allow_unmatched:
            out["allow_unmatched"] = True
        if self.runtime:
            out["runtime"] = self.runtime
        return out

    @classmethod
    def from_dict(cls, data, source: str = "<config>") -> RunConfig:
        """The RunConfig a record's config stands for; errors name `source` and the field."""
        check_config_dict(data, source)
        try:
            inline = data.get("model_spec")
            spec = (
                spec_from_dict(inline, f"{source}: config.model_spec")
                if inline is not None
                else get_spec(data["model"])
            )
            policy = load_policy(data["policy"])
            comp = data.get("compression", {})
            if comp != compression_dict(policy):
                raise ValueError(
                    f"field 'compression' = {comp!r}: policy {data['policy']!r} "
                    f"now says {compression_dict(policy)!r}"
                )
            return cls(
                spec,
                policy,
                Scenario(
                    **{k: data["scenario"][k] for k in SCENARIO_FIELDS},
                    prefix_tokens=data["scenario"].get("prefix_tokens", 0),
                ),
                data.get("fused", True),
                data.get("kv_dtype", "fp16"),
                data["profile"],
                data["backend"],
                tuple(data.get("backend_options", {}).items()),
                data["model"] if inline is not None else "",
                data.get("allow_unmatched", False),
                data.get("runtime", ""),
            )
        except ValueError as e:
            raise ValueError(f"{source}: config: {e}") from e


def compression_dict(policy: Policy) -> dict:
    """{"prune": ..., "activations": ..., "quantize": ...} of a policy's compression tables
    (absent ones left out; {} for a round-to-nearest weight-only policy). The device model costs
    a GPTQ / AWQ policy exactly as RTN (same stored bytes, same kernels): records and sweep rows
    tell them apart by "quantize"."""
    out = {}
    if policy.prune is not None:
        out["prune"] = policy.prune.to_dict()
    if policy.activations is not None:
        out["activations"] = policy.activations.to_dict()
    if policy.quantize is not None and policy.calibrated:
        out["quantize"] = policy.quantize.to_dict()
    return out


def spec_to_dict(spec: ModelSpec) -> dict:
    """A spec as the table spec_from_dict reads (a checkpoint's spec, stored inline)."""
    out = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.init}
    if spec.rope_scaling is None:
        out.pop("rope_scaling")
    else:
        out["rope_scaling"] = dataclasses.asdict(spec.rope_scaling)
    return out


def _require(cond: bool, source: str, where: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{source}: field '{where}': {msg}")


def check_config_dict(cfg, source: str, prefix: str = "config.") -> None:
    """Raise ValueError naming `source` and the field when `cfg` is not a config's dict form
    (its shape and types; what the names resolve to is from_dict's business)."""
    _require(isinstance(cfg, dict), source, prefix.rstrip("."), f"must be an object, got {cfg!r}")
    for key in CONFIG_FIELDS:
        _require(key in cfg, source, f"{prefix}{key}", "missing")
    for key in ("model", "policy", "profile", "backend"):
        _require(
            isinstance(cfg[key], str) and cfg[key],
            source,
            f"{prefix}{key}",
            f"must be a non-empty string, got {cfg[key]!r}",
        )
    _require(isinstance(cfg["scenario"], dict), source, f"{prefix}scenario", "must be an object")
    for key in SCENARIO_FIELDS:
        v = cfg["scenario"].get(key)
        lo = 0 if key == "new_tokens" else 1
        _require(
            isinstance(v, int) and not isinstance(v, bool) and v >= lo,
            source,
            f"{prefix}scenario.{key}",
            f"must be an integer >= {lo}, got {v!r}",
        )
    v = cfg["scenario"].get("prefix_tokens", 0)
    _require(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0,
        source,
        f"{prefix}scenario.prefix_tokens",
        f"must be an integer >= 0, got {v!r}",
    )
    opts = cfg.get("backend_options", {})
    _require(
        isinstance(opts, dict) and all(isinstance(v, str) for v in opts.values()),
        source,
        f"{prefix}backend_options",
        f"must be an object of strings, got {opts!r}",
    )
    _require(
        isinstance(cfg.get("fused", True), bool),
        source,
        f"{prefix}fused",
        f"must be true or false, got {cfg.get('fused')!r}",
    )
    comp = cfg.get("compression", {})
    _require(
        isinstance(comp, dict)
        and set(comp) <= {"prune", "activations"}
        and all(isinstance(v, dict) for v in comp.values()),
        source,
        f"{prefix}compression",
        f"must be an object with prune / activations objects, got {comp!r}",
    )
    _require(
        isinstance(cfg.get("allow_unmatched", False), bool),
        source,
        f"{prefix}allow_unmatched",
        f"must be true or false, got {cfg.get('allow_unmatched')!r}",
    )
    _require(
        isinstance(cfg.get("runtime", ""), str),
        source,
        f"{prefix}runtime",
        f"must be a string, got {cfg.get('runtime')!r}",
    )
    _require(
        cfg.get("kv_dtype", "fp16") in KV_DTYPES,
        source,
        f"{prefix}kv_dtype",
        f"must be one of {list(KV_DTYPES)}, got {cfg.get('kv_dtype')!r}",
    )
