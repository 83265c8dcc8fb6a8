"""A runtime profile fitted on a benchmark command's phase times: what `harmony-ref calibrate
--backend command --runtime R` runs, on a phone through a device session or on this host (by
default llama.cpp's llama-bench, fitted as the `llama.cpp-host` runtime on this machine's own
measured SoC profile).

    table, summary = calibrate_runtime_phases(
        "llama-bench -m {model} -p {prompt_tokens} -n {new_tokens} -t {threads} -d {depth} -o json",
        "llama-bench", [Workload("smollm2-135m", "as-stored", 128, 32, threads=1), ...],
        "host.toml", "llama.cpp-host", 600.0, "llama.toml")

A workload is model:policy:prompt:new[:threads[:depth]]: `threads` fills `{threads}` and is the
thread count the model predicts with (0: the runtime's own), `depth` fills `{depth}` (tokens
already in the cache). `policy` may be `as-stored` for a GGUF file: its tensors' own types.
llama-bench's tests are read the way calibrate/llamacpp.py reads the committed ones: `pp P` is a
prefill of P new tokens after `depth` cached ones, `tg N` is N decode steps after `depth`, so
each phase is priced on the configuration it actually ran. Other formats report one generation
(a prefill of the prompt, then the new tokens): both phases are priced on that configuration.
Every third workload is held out: the fit never sees it, and the summary reports its error.
"""

from __future__ import annotations

from dataclasses import dataclass

from harmony_ref._io import write_checked
from harmony_ref.calibrate.fit import PHASE_METRICS
from harmony_ref.calibrate.run import _check_valid_repeats, phase_value, workload_run_config
from harmony_ref.metrics import ape_pct, mape_pct

# what a phase calibration moves when --params does not say: on a phone the prompt's matmul,
# the DRAM read and the per-op overhead (a phone's decode is memory-bound); on this host (a
# measured SoC profile, a model in or near the cache) the prompt's matmul, a decode step's GEMVs
# and attention over the cache and the per-op overhead, the bandwidth the measured one times the
# runtime's prior memory efficiency (fitting the prompt's attention too took minutes and traded
# the per-op overhead against the GEMVs: 22% held out on llama-bench, against 6% without it)
PHASE_PARAMS = ("matmul", "memory", "launch_us")
HOST_PHASE_PARAMS = ("matmul", "gemv", "attention_decode", "launch_us")
HELD_OUT_EVERY = 3  # every third workload (i % 3 == 2) is scored, never fitted


@dataclass(frozen=True)
class Workload:
    model: str
    policy: str
    prompt: int
    new: int
    threads: int = 0  # 0: the runtime profile's own thread count
    depth: int = 0  # tokens already in the cache when the benchmark starts

    @property
    def label(self) -> str:
        t = f"-t{self.threads}" if self.threads else ""
        d = f"-d{self.depth}" if self.depth else ""
        return f"{self.policy}-p{self.prompt}-n{self.new}{t}{d}"


def phase_configs(w: Workload, fmt: str):
    """(the workload's RunConfig, which fills the command template; {metric: the RunConfig that
    phase ran}) for one workload (the module docstring)."""
    from harmony_ref.config import RunConfig

    base = workload_run_config(w.model, w.policy, w.prompt, w.new)
    if fmt != "llama-bench":
        if w.depth:
            raise ValueError(
                f"workload {w.label}: a depth applies to --parser llama-bench (its -d), "
                f"not to {fmt}"
            )
        return base, {m: base for m in PHASE_METRICS.values()}
    ctx = base.scenario.context_tokens
    prompt = w.depth + w.prompt
    return base, {
        "prefill_ms": RunConfig.from_names(
            base.spec,
            base.policy,
            prompt,
            1,
            max(prompt + 1, ctx),
            prefix_tokens=w.depth,
            checkpoint=base.checkpoint,
        ),
        "decode_step_ms": RunConfig.from_names(
            base.spec,
            base.policy,
            max(w.depth, 1),
            w.new,
            max(w.depth + w.new + 1, ctx),
            checkpoint=base.checkpoint,
        ),
    }


def calibrate_runtime_phases(
    command_template: str,
    fmt: str,
    workloads,
    profile: str,
    runtime: str,
    timeout_s: float | None,
    out,
    params: tuple[str, ...] | None = None,
    session=None,
    progress=None,
    profile_label: str = "",
) -> tuple[list[dict], dict]:
    """Run the command per workload on the device `profile` describes, fit `runtime`'s `params`
    (default PHASE_PARAMS) on the prefill and decode-step times of the fit workloads, write the
    runtime profile, score the held-out ones. A run that fails raises BackendError; with
    `session`, each workload's times are the medians over its unthrottled repeats."""
    from harmony_ref.backends.command import CommandDevice
    from harmony_ref.calibrate.fit_runtime import shared_only
    from harmony_ref.calibrate.points import Point
    from harmony_ref.device.runtime import load_profile, load_runtime

    params = tuple(params or PHASE_PARAMS)
    # the fit is this device's: its numbers become the profile's shared ones, and no other
    # SoC's [[soc_efficiency]] entry (fitted with the old shared numbers) is carried over
    base = shared_only(load_runtime(runtime))
    load_profile(profile, base)  # the runtime must run on this SoC: checked before any run
    workloads = [w if isinstance(w, Workload) else Workload(*w) for w in workloads]
    configs = [phase_configs(w, fmt) for w in workloads]  # every bad name fails before a run
    dev = CommandDevice(command_template, fmt, timeout_s, session=session, progress=progress)
    points = []
    for i, (w, (cfg, phases)) in enumerate(zip(workloads, configs)):
        dev.values = {"threads": w.threads, "depth": w.depth}
        m = dev.run(cfg)
        _check_valid_repeats(m, cfg)
        for metric, phase_cfg in phases.items():
            value = phase_value(m, fmt, metric)
            points.append(
                Point(
                    f"w{i}:{w.label}:{metric}",
                    "records",
                    profile,
                    runtime,
                    w.threads,
                    phase_cfg,
                    metric,
                    value,
                    "score" if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else "fit",
                    source=m.provenance.get("command", ""),
                )
            )
    how = f"harmony-ref calibrate --backend command --runtime {runtime}"
    table, summary = fit_runtime_on_points(
        base, points, params, out, f"command {fmt} runs", profile_label or profile, how
    )
    return table, {**summary, "backend": "command"}


def fit_runtime_on_points(
    base, points, params, out, measured_by: str, profile_label: str, how: str
) -> tuple[list[dict], dict]:
    """Fit `base`'s `params` on the points of split "fit", score the held-out ones, write the
    runtime profile to `out` (a file that does not load back never replaces the previous one):
    (one row per point, measured beside the fitted model; the summary with the held-out MAPE
    of all phases and of prefill and decode apart). `measured_by` names the runs in the
    profile's calibration method, `how` the command that fitted it in its header."""
    from harmony_ref.calibrate.fit_runtime import (
        PARAMS,
        calibrated,
        fit_on_points,
        runtime_toml,
    )
    from harmony_ref.calibrate.points import fitted_twins
    from harmony_ref.device.runtime import load_runtime

    fit_pts = [p for p in points if p.split == "fit"]
    # a held-out point that is the same measurement as a fit one (llama-bench's `pp P` of two
    # workloads differing only in new tokens) would score the fit on its own data: shown, with
    # the fit point it repeats, and not scored
    twins = fitted_twins(fit_pts, [p for p in points if p.split == "score"])
    rt, report = fit_on_points(base, fit_pts, params)
    table = [
        {
            "id": p.id,
            "split": p.split,
            "scored": p.split == "score" and p.id not in twins,
            "same_as_fit": twins.get(p.id, ""),
            "threads": p.threads,
            "metric": p.metric,
            "measured": p.measured,
            "model": (v := p.predicted(rt)),
            "ape_pct": ape_pct(v, p.measured),
        }
        for p in points
    ]

    def mape(metric):
        pairs = [
            (r["model"], r["measured"])
            for r in table
            if r["scored"] and metric in (None, r["metric"])
        ]
        return mape_pct(pairs) if pairs else None

    held = mape(None)
    rt = calibrated(
        rt,
        f"least squares on log error over {list(report.fitted)}, {measured_by}",
        [p.id for p in fit_pts],
        [r["id"] for r in table if r["scored"]],
        report.fit_mape_pct,
        float("nan") if held is None else held,
    )
    comments = {}
    for name in report.fitted:
        sec, key, _, _ = PARAMS[name]
        comments[f"{sec}.{key}" if sec else key] = f"fitted on {len(fit_pts)} points, {measured_by}"
    write_checked(
        out,
        runtime_toml(
            rt,
            comments,
            f"{rt.description}\nFitted by `{how}` on {profile_label}; numbers without a "
            "comment are the prior's.",
        ),
        load_runtime,  # a file that does not load back never replaces the previous one
    )
    summary = {
        "runtime": str(out),
        "profile": profile_label,
        "fitted": list(report.fitted),
        "not_fitted": list(report.not_fitted),
        "fit_mape_pct": report.fit_mape_pct,
        "held_out_phase_mape_pct": held,
        "held_out_prefill_mape_pct": mape("prefill_ms"),
        "held_out_decode_mape_pct": mape("decode_step_ms"),
        "held_out_points": sum(r["scored"] for r in table),
        "not_scored": twins,  # held-out id -> the fit point it repeats
    }
    return table, summary
