"""Where a prediction's time goes, by op kind: the tables `harmony-ref predict --breakdown`
prints. Each op of a graph is costed alone by device/cost.py's `graph_cost` (the same roofline
and launch terms as the whole graph) and the runs are summed per kind; a CPU-fallback op gets its
own row, and `fallback_rows` splits its cost into the NPU <-> CPU copy and the two launches.

    tables = scenario_breakdown(profile, config)   # {title: rows} for prefill and a decode step
    rows = op_breakdown(profile, graph)            # one graph, by op kind, largest first
"""

from __future__ import annotations

import dataclasses

from harmony_ref.config import RunConfig
from harmony_ref.device.cost import Roofline, config_graph, graph_cost, static_kv_positions
from harmony_ref.device.ops import placement
from harmony_ref.device.soc import DTYPES, DeviceProfile
from harmony_ref.model.graph import Graph, Segment
from harmony_ref.units import GIGA, MB, MS_PER_S


def op_breakdown(profile: DeviceProfile, graph: Graph) -> list[dict]:
    """Where one graph's time goes, by op kind: time, launches, DRAM bytes, how many of its
    kernels are memory-bound and what its matrix work computes in on this profile (`computes_in`:
    compute dtypes joined by "+", "vector" for a kind without matrix work); a kind's CPU-fallback
    ops get their own row ("silu (cpu)"). Rows sorted by time, largest first."""
    rows: dict[str, dict] = {}
    dtypes: dict[str, set[str]] = {}
    for op, count in graph.unique_ops():
        one = dataclasses.replace(graph, segments=(Segment((op,)),))
        c = graph_cost(profile, one)
        kind = f"{op.op_type} (cpu)" if c.fallback_runs else op.kind
        r = rows.setdefault(
            kind,
            {
                "kind": kind,
                "computes_in": "",
                "time_ms": 0.0,
                "launch_ms": 0.0,
                "launches": 0,
                "dram_mb": 0.0,
                "gflop": 0.0,
                "memory_bound": 0,
            },
        )
        if op.flops:
            dtypes.setdefault(kind, set()).add(profile.compute.op_compute_dtype(op))
        r["computes_in"] = "+".join(d for d in DTYPES if d in dtypes.get(kind, ())) or "vector"
        r["time_ms"] += count * c.time_s * MS_PER_S
        r["launch_ms"] += count * c.launch_s * MS_PER_S
        r["launches"] += count
        r["dram_mb"] += count * c.dram_bytes / MB
        r["gflop"] += count * c.flops / GIGA
        r["memory_bound"] += count if c.memory_s >= c.compute_s else 0
    total = sum(r["time_ms"] for r in rows.values())
    for r in rows.values():
        r["time_pct"] = 100.0 * r["time_ms"] / total
    return sorted(rows.values(), key=lambda r: -r["time_ms"])


def scenario_breakdown(profile: DeviceProfile, config: RunConfig) -> dict[str, list[dict]]:
    """Per-kind tables (op_breakdown) for the prefill graph and the decode step at the middle
    generated token, keyed by their titles (`harmony-ref predict --breakdown`)."""
    s = config.scenario
    prefill = config_graph(
        profile, config, "prefill", tokens=s.new_prompt_tokens, context=s.prompt_tokens
    )
    cached = f" after a cached prefix of {s.prefix_tokens}" if s.prefix_tokens else ""
    out = {
        f"prefill of {s.new_prompt_tokens} tokens{cached}, by op kind": op_breakdown(
            profile, prefill
        )
    }
    graphs = [("prefill", prefill)]
    if config.spec.is_decoder:
        ctx = (
            static_kv_positions(profile, config) or s.prompt_tokens + max(s.new_tokens, 1) // 2 + 1
        )
        decode = config_graph(profile, config, "decode", context=ctx)
        out[f"one decode step at context {ctx}, by op kind"] = op_breakdown(profile, decode)
        graphs.append(("decode step", decode))
    rows = fallback_rows(profile, graphs)
    if rows:
        out["CPU fallback ops (not on this NPU): runs and cost"] = rows
    return out


def fallback_rows(profile: DeviceProfile, graphs: list[tuple[str, Graph]]) -> list[dict]:
    """Per fallback op type and graph: runs, their total time and the part of it that is the
    NPU <-> CPU copy and the two launches."""
    r = Roofline.of(profile)
    out = []
    for label, graph in graphs:
        by: dict[str, dict] = {}
        for op, count in graph.unique_ops():
            if placement(profile, op.op_type) != "fallback":
                continue
            one = dataclasses.replace(graph, segments=(Segment((op,)),))
            c = graph_cost(profile, one)
            row = by.setdefault(
                op.op_type,
                {
                    "op": op.op_type,
                    "graph": label,
                    "runs": 0,
                    "time_ms": 0.0,
                    "transfer_ms": 0.0,
                    "launch_ms": 0.0,
                },
            )
            row["runs"] += count
            row["time_ms"] += count * c.time_s * MS_PER_S
            row["transfer_ms"] += (
                count * (op.act_in_bytes + op.act_out_bytes) / r.transfer_bytes_per_s * MS_PER_S
            )
            row["launch_ms"] += count * (r.launch_s + r.cpu_launch_s) * MS_PER_S
        out.extend(by.values())
    return out
