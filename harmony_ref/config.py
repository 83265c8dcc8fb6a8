"""One point to measure: a model spec, a quantization policy and a scenario.

    Config.from_names(model="llama-3.2-3b", policy="int4-g128", prompt_tokens=512, new_tokens=128)

`Scenario` says what the app does: process a prompt of `prompt_tokens`, then generate
`new_tokens`, with a KV cache allocated for `context_tokens` positions (what a phone runtime
reserves up front; prompt + generated tokens must fit in it), for `batch` requests at once.
The device profile is not part of a Config: a backend (SimulatedDevice(profile), HostDevice, ...)
is the device.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harmony_ref.model.spec import ModelSpec, get_spec
from harmony_ref.quant.policy import Policy, load_policy

KV_DTYPES = ("fp16", "int8")


@dataclass(frozen=True)
class Scenario:
    prompt_tokens: int = 512
    new_tokens: int = 128
    context_tokens: int = 2048
    batch: int = 1

    def __post_init__(self):
        for name, lo in (("prompt_tokens", 1), ("new_tokens", 0), ("context_tokens", 1), ("batch", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ValueError(f"scenario: field '{name}' = {v!r}: must be an int >= {lo}")
        if self.prompt_tokens + self.new_tokens > self.context_tokens:
            raise ValueError(
                f"scenario: prompt_tokens + new_tokens = {self.prompt_tokens} + {self.new_tokens} "
                f"exceeds context_tokens = {self.context_tokens} (the KV cache would overflow)"
            )


@dataclass(frozen=True)
class Config:
    spec: ModelSpec
    policy: Policy
    scenario: Scenario = field(default_factory=Scenario)
    fused: bool = True
    kv_dtype: str = "fp16"  # KV cache storage: fp16, or int8 with one float32 scale per head per token

    def __post_init__(self):
        if self.kv_dtype not in KV_DTYPES:
            raise ValueError(f"config: field 'kv_dtype' = {self.kv_dtype!r}: must be one of {list(KV_DTYPES)}")
        # TTFT is the first generated token: a decoder scenario with nothing to generate has none
        # (and would report a TTFT longer than its end-to-end time).
        if self.spec.is_decoder and self.scenario.new_tokens < 1:
            raise ValueError(f"config: new_tokens = {self.scenario.new_tokens}: {self.spec.name} is a "
                             f"decoder, it must generate at least 1 token")
        # An encoder runs one forward pass over the prompt; new/context tokens do not apply.
        if not self.spec.is_decoder and self.scenario.prompt_tokens > self.spec.max_positions:
            raise ValueError(
                f"config: prompt_tokens = {self.scenario.prompt_tokens} exceeds {self.spec.name}'s "
                f"max_positions = {self.spec.max_positions}"
            )

    @classmethod
    def from_names(cls, model: str = "llama-3.2-3b", policy: str = "int4-g128",
                   prompt_tokens: int = 512, new_tokens: int = 128, context_tokens: int = 2048,
                   batch: int = 1, fused: bool = True, kv_dtype: str = "fp16") -> "Config":
        return cls(get_spec(model), load_policy(policy),
                   Scenario(prompt_tokens, new_tokens, context_tokens, batch), fused, kv_dtype)

    @property
    def label(self) -> str:
        s = self.scenario
        return (f"{self.spec.name}/{self.policy.name}/p{s.prompt_tokens}-n{s.new_tokens}"
                f"-c{s.context_tokens}-b{s.batch}" + ("" if self.fused else "/unfused")
                + ("" if self.kv_dtype == "fp16" else f"/kv-{self.kv_dtype}"))
