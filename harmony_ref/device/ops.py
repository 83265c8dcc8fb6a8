"""Operator support: which of a model's op types the profile's NPU runs, which fall back to the
CPU, and which cannot run at all (the converter whitelist check to make before deployment: an
unsupported op may otherwise fail silently and return zeros).

A profile's [npu] section lists `ops` (the op types, model/graph.py OP_TYPES, its NPU runtime
converts) and `cpu_ops` (the ones the CPU runtime implements). For each op type a model uses:
- `npu`: in `ops` (on a profile with an NPU);
- `cpu`: the profile has no NPU at all (every cube_*_tops is 0): the CPU runs everything as its
  own path, nothing is a fallback; needs the type in `cpu_ops`;
- `fallback`: not in `ops` but in `cpu_ops`: runs on the CPU and pays, per run (device/cost.py),
  its CPU time (the [compute] CPU rates), the copy of its inputs and outputs between NPU and CPU
  memory at `npu.transfer_gbps`, a CPU dispatch (`cpu.launch_us`) and one more NPU launch (the
  NPU graph is cut in two around it);
- `none`: in neither list, so no backend of this profile runs it: `harmony-ref check-ops` exits 1
  and the cost model refuses the config (OpsUnsupported, naming the profile file and the op).
A profile without [npu] runs every op type on its NPU (no op list to check against).
"""

from __future__ import annotations

from harmony_ref.config import RunConfig
from harmony_ref.device.soc import DTYPES, DeviceProfile
from harmony_ref.model.graph import build_graph, op_counts, op_types_used

PLACES = ("npu", "cpu", "fallback", "none")


class OpsUnsupported(ValueError):
    """A model uses an op type no backend of the profile runs."""


def has_npu(profile: DeviceProfile) -> bool:
    return any(profile.compute.on_npu(d) for d in DTYPES)


def placement(profile: DeviceProfile, op_type: str) -> str:
    """Where `op_type` runs on `profile`: one of PLACES (see the module docstring)."""
    npu = profile.npu
    if npu is None:
        return "npu" if has_npu(profile) else "cpu"
    if not has_npu(profile):
        return "cpu" if op_type in npu.cpu_ops else "none"
    if op_type in npu.ops:
        return "npu"
    return "fallback" if op_type in npu.cpu_ops else "none"


def fallback_ops(profile: DeviceProfile, config: RunConfig) -> frozenset[str]:
    """Op types of `config`'s model that run on the CPU as an NPU fallback. Raises
    OpsUnsupported when one runs nowhere."""
    used = op_types_used(config.spec, config.policy)
    where = {t: placement(profile, t) for t in used}
    missing = [t for t, w in where.items() if w == "none"]
    if missing:
        raise OpsUnsupported(
            f"{profile.source}: field 'npu' does not list op {missing[0]!r} (used by "
            f"{config.spec.name}) in ops or cpu_ops: no backend of {profile.name} runs it "
            "(harmony-ref check-ops lists every such op)"
        )
    return frozenset(t for t, w in where.items() if w == "fallback")


def check_ops(profile: DeviceProfile, config: RunConfig) -> list[dict]:
    """One row per op type the model uses: where it runs and how often per prefill of the
    scenario's prompt and per decode step (unfused counts: one per op the model defines)."""
    s = config.scenario
    kw = dict(fused=False, kv_dtype=config.kv_dtype, batch=s.batch)
    spec, policy = config.spec, config.policy
    prefill = op_counts(build_graph(spec, policy, "prefill", tokens=s.prompt_tokens, **kw))
    decode = (
        op_counts(build_graph(spec, policy, "decode", context=s.prompt_tokens + 1, **kw))
        if spec.is_decoder
        else {}
    )
    rows = []
    for t in op_types_used(config.spec, config.policy):
        rows.append(
            {
                "op": t,
                "runs_on": placement(profile, t),
                "in_npu_ops": profile.npu is None or t in profile.npu.ops,
                "in_cpu_ops": profile.npu is not None and t in profile.npu.cpu_ops,
                "prefill_runs": prefill.get(t, 0),
                "decode_runs_per_step": decode.get(t, 0),
            }
        )
    return rows
