"""Breakdown metrics SimulatedDevice and HostDevice both report, computed by one implementation.

- `add_memory_metrics(m, mem, ...)`: weights / KV cache / activations / workspace, the app budget,
  the headroom and whether the estimate fits it, from a `device.memory.MemoryEstimate`
  (SimulatedDevice: the profile's; HostDevice: the model it measured, against the host profile's
  budget or this machine's RAM). `peak_memory_mb` is not here: predicted by one, measured (RSS) by
  the other.
- `roofline_op_s(profile, op)`: (compute_s, memory_s) of one graph op on a profile, by the cost
  model's own per-op roofline (device/cost.py), so HostDevice classifies ops exactly as the model
  costs them.
"""

from __future__ import annotations

import numpy as np

from harmony_ref.metrics import Metrics
from harmony_ref.units import MB


def add_memory_metrics(m: Metrics, mem, kind: str = "exact", budget_source: str = "RAM x app_memory_share",
                       workspace_source: str = "") -> None:
    """The memory split of `mem` (a MemoryEstimate) into `m`. `budget_source` says where the
    budget came from (a profile's RAM x app share, or this host's RAM)."""
    m.add("weights_mb", mem.weights_bytes / MB, "MB", "lower", kind)
    m.add("kv_cache_mb", mem.kv_cache_bytes / MB, "MB", "lower", kind,
          description="K and V of every layer at context_tokens, for every request of the batch")
    m.add("activations_mb", mem.activations_bytes / MB, "MB", "lower", kind,
          description="largest live op set of the prefill graph + the residual stream")
    m.add("workspace_mb", mem.workspace_bytes / MB, "MB", "none", kind, description=workspace_source)
    m.add("app_budget_mb", mem.budget_bytes / MB, "MB", "none", kind, description=budget_source)
    m.add("memory_headroom_mb", mem.headroom_bytes / MB, "MB", "higher", kind,
          description="app budget - (weights + KV cache + activations + workspace)")
    m.add("fits_memory", 1.0 if mem.fits else 0.0, "bool", "higher", kind,
          description=f"1 when weights + KV cache + activations + workspace fit {budget_source}")


class _OneOp:
    """A one-op stand-in for a Graph (what device.cost evaluates: `unique_ops()`)."""

    def __init__(self, op):
        self._op = op

    def unique_ops(self):
        return [(self._op, 1)]


def roofline_op_s(profile, op) -> tuple[float, float]:
    """(compute_s, memory_s) of one run of graph op `op` on `profile`, as the cost model charges it
    (efficiencies, per-dtype peaks, on-chip tiling passes; launch overhead not included)."""
    from harmony_ref.device.cost import _evaluate

    r = _evaluate(profile, _OneOp(op), None, np.zeros(1), 1.0, 1.0)
    return float(r["compute_s"][0]), float(r["memory_s"][0])
