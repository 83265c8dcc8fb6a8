"""How far a calibrated model is from measurements it was not fitted on.

- per op: MAPE on the held-out microbenchmark sizes (every third size of each family);
- end to end: prefill, decode step and e2e of whole-model workloads never fitted on
  (HELDOUT_WORKLOADS), measured by HostDevice and predicted by SimulatedDevice with the written
  profile (`heldout_e2e`). The end-to-end MAPE is taken on unfused graphs, where the host makes
  exactly one kernel call per graph op, as the model charges; fused rows are scored apart.
A LoadCanary (calibrate/microbench.py) labels the rows measured while the machine was busy.
`Calibration` holds a fit with its scores; `calibrate_ops` fits, scores and writes the profile text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harmony_ref.backends.base import E2E_METRICS
from harmony_ref.backends.host_timing import pick
from harmony_ref.calibrate.fit import HostFit, OpSample, fit, fit_launch_on_phases, seed_rates
from harmony_ref.calibrate.write import host_profile_toml
from harmony_ref.metrics import ape_pct, mape_pct
from harmony_ref.units import GB, MS_PER_S, US_PER_S

# Whole-model runs the fit never sees: (model, width divisor, policy, prompt, new tokens, context,
# fused). The end-to-end MAPE is taken on unfused graphs: there the host makes exactly one kernel
# call per graph op, as the model charges. On a fused graph the model assumes epilogue fusion
# (matmul + bias, rope + KV write, ...) that the host has no kernels for: those rows are shown,
# and scored apart, as the cost of the missing fusion, not as model error.
HELDOUT_WORKLOADS = [
    ("qwen2.5-0.5b", 2, "int4-g128", 64, 16, 128, False),
    ("llama-3.2-1b", 4, "int8", 32, 16, 64, False),
    ("all-minilm-l6", 1, "int8", 128, 0, 128, False),
    ("qwen2.5-0.5b", 2, "int4-g128", 64, 16, 128, True),
]


# Whole-model runs whose per-op times join the fit (the host's own op implementations: numpy
# elementwise ops, KV-cache writes, attention, at the shapes real layers have).
FIT_WORKLOADS = [
    ("qwen2.5-0.5b", 4, "int4-g32", 32, 8, 64, False),
    ("llama-3.2-1b", 8, "int8", 16, 8, 32, False),
    ("all-minilm-l6", 2, "int4-g32", 64, 0, 64, False),
]


QUICK_FIT_WORKLOADS = [
    ("qwen2.5-0.5b", 8, "int4-g32", 32, 8, 64, False),
    ("llama-3.2-1b", 8, "int8", 16, 8, 32, False),
]


QUICK_WORKLOADS = [
    ("qwen2.5-0.5b", 4, "int4-g128", 16, 8, 32, False),
    ("qwen2.5-0.5b", 4, "int4-g128", 16, 8, 32, True),
]


@dataclass
class Calibration:
    fit: HostFit
    ops: list[OpSample]
    profile_toml: str
    per_op_mape_pct: float
    fit_mape_pct: float
    e2e: list[dict] = field(default_factory=list)  # one row per held-out workload and metric
    launch_floor_s: float | None = None
    notes: dict[str, str] = field(default_factory=dict)

    def _e2e_mape(self, fused: bool, quiet_only: bool = False) -> float | None:
        rows = [
            r
            for r in self.e2e
            if r["metric"] == "e2e_ms"
            and r["fused"] == fused
            and not (quiet_only and r.get("contended"))
        ]
        return mape_pct((r["model"], r["measured"]) for r in rows) if rows else None

    @property
    def e2e_quiet_mape_pct(self) -> float | None:
        """As e2e_mape_pct, over the workloads measured while the load canary was quiet."""
        return self._e2e_mape(False, quiet_only=True)

    @property
    def e2e_mape_pct(self) -> float | None:
        """Held-out whole-model e2e MAPE on unfused graphs (see HELDOUT_WORKLOADS)."""
        return self._e2e_mape(False)

    @property
    def e2e_fused_mape_pct(self) -> float | None:
        return self._e2e_mape(True)

    def op_table(self):
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "op": op.name,
                    "set": "held-out" if op.holdout else "fit",
                    "regime": self.fit.regimes[op.name],
                    "measured_us": op.time_s * US_PER_S,
                    "model_us": self.fit.predict_s(op) * US_PER_S,
                    "ape_pct": ape_pct(self.fit.predict_s(op), op.time_s),
                }
                for op in self.ops
            ]
        )


def calibrate_ops(
    ops: list[OpSample],
    stream_gbps: float,
    nominal: dict[str, float],
    onchip_bytes: int,
    ram_bytes: float,
    description: str,
    name: str = "host",
    phase_runs=(),
    stat: str = "min",
) -> Calibration:
    """Fit on the non-held-out ops, score on the held-out ones, write the profile text. With
    `phase_runs` (host Measurements of fit workloads) the launch overhead is refitted on their phases."""
    f = fit(ops, seed_bandwidth=stream_gbps * GB, seed_rates=seed_rates(ops))
    if phase_runs:
        f = fit_launch_on_phases(f, phase_runs, onchip_bytes, stat)
    held = [(f.predict_s(op), op.time_s) for op in ops if op.holdout]
    train = [(f.predict_s(op), op.time_s) for op in ops if not op.holdout]
    if not held:
        raise ValueError("calibration: no held-out ops to score the model on (mark some holdout=1)")
    text = host_profile_toml(f, stream_gbps, nominal, onchip_bytes, ram_bytes, description, name)
    return Calibration(f, ops, text, mape_pct(held), mape_pct(train))


def phase_times_ms(run, new_tokens: int, stat: str = "min") -> dict[str, float]:
    """prefill_ms, decode_step_ms, e2e_ms of a host Measurement from its per-op times (min or median),
    summed the way HostDevice sums them."""
    out = {}
    pre = sum(pick(t, stat) for t in run.ops if t.phase == "prefill")
    out["prefill_ms"] = pre * MS_PER_S
    dec = [t for t in run.ops if t.phase == "decode"]
    e2e = pre
    if dec:
        step = sum(pick(t, stat) for t in dec)
        out["decode_step_ms"] = step * MS_PER_S
        e2e += new_tokens * step
    out["e2e_ms"] = e2e * MS_PER_S
    return out


def workload_config(model, div, policy, prompt, new, ctx, fused):
    """The RunConfig of a workload tuple, on the model narrowed `div` times (backends/host.py)."""
    from harmony_ref.backends.host import scaled_spec
    from harmony_ref.config import RunConfig

    cfg = RunConfig.from_names(
        model=model,
        policy=policy,
        prompt_tokens=prompt,
        new_tokens=new,
        context_tokens=ctx,
        fused=fused,
    )
    return cfg.with_spec(scaled_spec(cfg.spec, div))


CONTENDED_RATIO = 1.2  # load canary this much slower than at calibration: the row is "contended"


def heldout_e2e(profile, workloads, host_device, stat: str = "min", canary=None) -> list[dict]:
    """Measure each held-out workload on the host and predict it with SimulatedDevice(profile).
    `measured` sums each op's `stat` time (as the fit used); `measured_median` the medians.
    With a LoadCanary: wait (bounded) for a quiet moment first, and record the canary's slowdown
    before and after (`load_ratio`, the larger): rows above CONTENDED_RATIO are marked."""
    from harmony_ref.backends.simulated import SimulatedDevice

    sim = SimulatedDevice(profile)
    rows = []
    for w in workloads:
        cfg, fused = workload_config(*w), w[-1]
        before = canary.wait_quiet(CONTENDED_RATIO) if canary else None
        run = host_device.run(cfg)
        load = max(before, canary.ratio()) if canary else None
        measured = phase_times_ms(run, cfg.scenario.new_tokens, stat)
        predicted = sim.predict(cfg)
        for metric in E2E_METRICS:
            if metric in measured and metric in predicted:
                mv, pv = measured[metric], predicted.value(metric)
                rows.append(
                    {
                        "workload": cfg.label,
                        "fused": fused,
                        "metric": metric,
                        "measured": mv,
                        "measured_median": run.metrics.value(metric),
                        "model": pv,
                        "ape_pct": ape_pct(pv, mv),
                        "load_ratio": load,
                        "contended": bool(load is not None and load > CONTENDED_RATIO),
                    }
                )
    return rows
