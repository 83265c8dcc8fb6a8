"""Memory footprint of a config on a device: weights, KV cache, activations, runtime workspace.

- weights: every tensor at its real stored size (`WeightFormat.nbytes`: INT4 nibbles + fp16
  scales + int8 zero points, INT8 + fp32 row scales); a tied embedding is one tensor, stored in
  lm_head's format; norms, biases and BERT's position/type tables in fp16.
- KV cache: 2 (K and V) x layers x kv_heads x head_dim x context x bytes per value, GQA-aware, for
  every request of the batch, allocated for the scenario's full `context_tokens` (runtimes reserve
  it up front; a sliding-window layer keeps only its window, ModelSpec.kv_positions); int8 adds
  one float32 scale per token per KV head for K and for V (the layout of
  harmony_ref.kernels.KVCache, so host and model agree byte for byte).
- activations: the largest live set of the prefill graph (one op's inputs + outputs) plus the
  residual stream it must keep.
- workspace: the profile's `runtime_workspace_mb` (runtime, compiled graph, scratch).
peak = their sum; it fits when peak <= RAM x app_memory_share.

`add_memory_metrics(m, estimate)` writes that split as metrics (weights_mb, kv_cache_mb,
activations_mb, workspace_mb, app_budget_mb, memory_headroom_mb, fits_memory), one implementation
for SimulatedDevice (the profile's budget) and HostDevice (the model it measured, against the host
profile's budget or this machine's RAM). `peak_memory_mb` is not among them: predicted by one,
measured (RSS) by the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from harmony_ref.config import RunConfig
from harmony_ref.device.soc import DeviceProfile
from harmony_ref.metrics import Metrics
from harmony_ref.model.graph import (
    ACT_BYTES,
    build_graph,
    kv_bytes_per_token_per_layer,
    layer_groups,
    weight_nbytes,
)
from harmony_ref.model.prune import pruned_spec
from harmony_ref.model.spec import ModelSpec
from harmony_ref.quant.policy import Policy, WeightFormat
from harmony_ref.units import MB

_NOMINAL_BYTES = {"fp32": 4.0, "fp16": 2.0, "int8": 1.0, "int4": 0.5}


def _tensor_bytes(fmt: WeightFormat, n: int, k: int, name: str, include_scales: bool) -> float:
    if include_scales:
        return weight_nbytes(fmt, n, k, name)
    return _NOMINAL_BYTES[fmt.kind] * n * k


def weights_bytes(spec: ModelSpec, policy: Policy, include_scales: bool = True) -> float:
    """Stored bytes of every parameter under `policy`. include_scales=False counts the packed
    values only (4 bits per INT4 weight), the "before scales" figure."""
    spec = pruned_spec(spec, policy.prune)  # a [prune] policy stores smaller matrices
    total = 0.0
    for formats, layers in layer_groups(
        spec, policy
    ):  # blocks with the same formats weigh the same
        for fmt, lin in zip(formats, spec.layer_linears(layers[0])):
            block = _tensor_bytes(fmt, lin.n_out, lin.k_in, lin.name, include_scales)
            total += len(layers) * (block + (ACT_BYTES * lin.n_out if lin.bias else 0))
    total += ACT_BYTES * spec.n_layers * spec.norm_params_per_layer()
    head = spec.head_linear()
    total += _tensor_bytes(
        policy.format_for(head.name), head.n_out, head.k_in, head.name, include_scales
    )
    total += ACT_BYTES * head.n_out if head.bias else 0
    if spec.is_decoder:
        total += ACT_BYTES * spec.hidden  # final norm
        if not spec.tie_embeddings:
            fmt = policy.format_for(spec.embed_name)
            total += _tensor_bytes(fmt, spec.vocab, spec.hidden, spec.embed_name, include_scales)
    else:
        fmt = policy.format_for(spec.embed_name)
        total += _tensor_bytes(fmt, spec.vocab, spec.hidden, spec.embed_name, include_scales)
        total += ACT_BYTES * (spec.embedding_params() - spec.vocab * spec.hidden)
    return total


def kv_cache_bytes(
    spec: ModelSpec, context_tokens: int, kv_dtype: str = "fp16", batch: int = 1
) -> int:
    """2 x kv_heads x head_dim x bytes (+ int8 scales) x the positions each layer keeps (the
    context; a sliding-window layer's last window), per request x batch."""
    if not spec.is_decoder:
        return 0
    positions = sum(spec.kv_positions(i, context_tokens) for i in range(spec.n_layers))
    return kv_bytes_per_token_per_layer(spec, kv_dtype) * positions * batch


@dataclass(frozen=True)
class MemoryEstimate:
    weights_bytes: float
    kv_cache_bytes: float
    activations_bytes: float
    workspace_bytes: float
    budget_bytes: float  # RAM x app_memory_share

    @property
    def peak_bytes(self) -> float:
        return (
            self.weights_bytes + self.kv_cache_bytes + self.activations_bytes + self.workspace_bytes
        )

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.budget_bytes

    @property
    def headroom_bytes(self) -> float:
        return self.budget_bytes - self.peak_bytes


def activations_bytes(config: RunConfig) -> float:
    s = config.scenario
    g = build_graph(
        config.spec,
        config.policy,
        "prefill",
        tokens=s.prompt_tokens,
        fused=config.fused,
        kv_dtype=config.kv_dtype,
        batch=s.batch,
    )
    live = max(op.act_in_bytes + op.act_out_bytes for op, _ in g.unique_ops())
    residual = s.batch * s.prompt_tokens * config.spec.hidden * ACT_BYTES
    return live + residual


def memory_estimate(profile: DeviceProfile, config: RunConfig) -> MemoryEstimate:
    s = config.scenario
    ctx = s.context_tokens if config.spec.is_decoder else s.prompt_tokens
    return MemoryEstimate(
        weights_bytes=weights_bytes(config.spec, config.policy),
        kv_cache_bytes=kv_cache_bytes(
            pruned_spec(config.spec, config.policy.prune), ctx, config.kv_dtype, s.batch
        ),
        activations_bytes=activations_bytes(config),
        workspace_bytes=profile.memory.workspace_bytes,
        budget_bytes=profile.memory.app_budget_bytes,
    )


def add_memory_metrics(
    m: Metrics,
    mem: MemoryEstimate,
    kind: str = "exact",
    budget_source: str = "RAM x app_memory_share",
    workspace_source: str = "",
) -> None:
    """The memory split of `mem` into `m`. `budget_source` says where the budget came from (a
    profile's RAM x app share, or this host's RAM)."""
    m.add("weights_mb", mem.weights_bytes / MB, "MB", "lower", kind)
    m.add(
        "kv_cache_mb",
        mem.kv_cache_bytes / MB,
        "MB",
        "lower",
        kind,
        description="K and V of every layer at context_tokens, for every request of the batch",
    )
    m.add(
        "activations_mb",
        mem.activations_bytes / MB,
        "MB",
        "lower",
        kind,
        description="largest live op set of the prefill graph + the residual stream",
    )
    m.add(
        "workspace_mb", mem.workspace_bytes / MB, "MB", "none", kind, description=workspace_source
    )
    m.add("app_budget_mb", mem.budget_bytes / MB, "MB", "none", kind, description=budget_source)
    m.add(
        "memory_headroom_mb",
        mem.headroom_bytes / MB,
        "MB",
        "higher",
        kind,
        description="app budget - (weights + KV cache + activations + workspace)",
    )
    m.add(
        "fits_memory",
        1.0 if mem.fits else 0.0,
        "bool",
        "higher",
        kind,
        description=f"1 when weights + KV cache + activations + workspace fit {budget_source}",
    )
