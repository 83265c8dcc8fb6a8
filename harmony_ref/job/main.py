"""The main job behind `harmony-ref run`: measure one run config in parts and make a run record.

    record = run_job(RunConfig.from_names(model="llama-3.2-3b", policy="int4-g128"))

Parts, in order (each can be skipped with --skip):
- `predicted`: the backend's metrics: SimulatedDevice(profile).predict(config) (TTFT, decode
  tokens/s, memory, kernel launches; exact; on a host profile the part's provenance names the
  model predicted and the one `--backend host` would measure), or with --backend host|command
  the same names measured by HostDevice / CommandDevice (host CPU frequency and temperatures go
  to the part's backend provenance) and physics-checked: a command backend against the phone
  profile, the host against a calibrated host profile given as --profile (which also adds the
  model's error, `host_model_mape_pct`), not at all against a shipped phone profile;
- `host`: short timed kernel calls on this machine, one thread (decode GEMV in the policy's format
  against NumPy FP32 `W @ x`, fused LayerNorm+bias+GELU against the same chain as three kernels),
  raw samples kept (measured; see job/host_kernels.py);
- `accuracy`: a real decoder's LM accuracy under the policy and KV dtype (the config's model when
  it is a checkpoint, else SmolLM2-135M; perplexity, its ratio to FP32, KLD mean/p99, top-1 on
  the first ACCURACY_CHUNKS chunks of the held-out corpus; the FP32 reference cached on disk),
  then MiniLM-L6's sentence-embedding accuracy on real weights;
- `coldstart`: cold / preload / preload+warm-up start times (exact);
- `thermal`: the 10-minute sustained-performance summary (exact);
- `fidelity`: the device model's own error against real runtimes (`fidelity_*` metrics: MAPE on
  the held-out host runs and llama-bench runs, the error on the published phone figures;
  track/fidelity.py on the committed measurements, so it does not depend on the run's config
  and is exact: a change that makes the model worse fails the gate like a slowdown). The host
  and llama-bench runs were measured on one machine: the metrics name its CPU and the part's
  `note` says when it is not this one. A --profile with its own calibration (`harmony-ref
  calibrate`'s output) reports that calibration's held-out error, `fidelity_profile_mape_pct`,
  in place of the host fixtures'.

A part whose input cannot be had here (the MiniLM weights when the package registry cannot be
reached) is recorded as `unavailable` with the reason, never faked; a part that raises anything
else is recorded as `failed` (the run exits 1), except a device that left mid-session
(DeviceGone, lab/transport.py), which stops the run: no record of it is made.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from harmony_ref.checkpoint.assets import AssetUnavailable
from harmony_ref.config import RunConfig
from harmony_ref.metrics import Metric, Metrics
from harmony_ref.track.record import Record, collect_provenance


@dataclass(frozen=True)
class Part:
    name: str
    title: str
    func: Callable[[RunConfig], Metrics | tuple[Metrics, dict]]  # dict: extra record facts


def _predicted(config: RunConfig):
    """The backend's metrics: predicted (simulated), or measured by HostDevice / CommandDevice
    and physics-checked; a measured backend's provenance goes into the part."""
    from harmony_ref.backends.make import make_backend
    from harmony_ref.device.runtime import config_profile

    opts = config.options
    dev = make_backend(
        config.backend,
        profile=config_profile(config),
        command=opts.get("command"),
        fmt=opts.get("format"),
        host_profile=_host_model_profile(config),
        session=opts.get("session"),
    )
    m = dev.run(config)
    if config.backend == "simulated":
        info = _runtime_calibration(config)
        if _is_shipped(config.profile):
            return (m.metrics, info) if info else m.metrics
        return m.metrics, {"backend_provenance": _simulated_host_provenance(config), **info}
    prov = {"backend": dev.name, **m.provenance, "physics": m.physics}
    info = {
        "backend_provenance": prov,
        "implausible": list(m.findings),
        **(_runtime_calibration(config) if config.backend == "host" else {}),
    }
    if m.session is not None:  # a device session: identity, pushes, per-repeat telemetry
        info["session"] = m.session
    measured = prov.get("host_model")
    # the host measured a narrower copy: say so (a checkpoint runs its own weights, never
    # scaled; its host_model is the checkpoint's label, not a spec name)
    if measured and not config.checkpoint and measured != config.spec.name:
        from harmony_ref.backends.host import fit_to_host, weight_mb

        info["measured_model"] = measured
        info["measured_weights_mb"] = round(weight_mb(fit_to_host(config, dev.max_weight_mb)), 1)
        info["model_weights_mb"] = round(weight_mb(config), 1)
    return m.metrics, info


def _runtime_calibration(config: RunConfig) -> dict:
    """The runtime the config ran on (`model_runtime`: its own or the profile's default) and
    which measurements it was fitted on and which scored it (its [calibration]), for the record:
    `host_model_mape_pct` is the error on the scored ones."""
    from harmony_ref.device.runtime import load_runtime
    from harmony_ref.device.soc import runtime_name

    name = runtime_name(config.profile, config.runtime)
    if not name:
        return {}
    cal = load_runtime(name).calibration
    if cal is None:
        return {"model_runtime": name}
    return {
        "model_runtime": name,
        "model_fitted_on": list(cal.fitted_on),
        "model_scored_on": list(cal.scored_on),
    }


def _is_shipped(profile: str) -> bool:
    from harmony_ref.device.soc import shipped_profiles

    return profile in shipped_profiles()


def _simulated_host_provenance(cfg: RunConfig) -> dict:
    """A simulated run on a host profile predicts the full model; `run --backend host` measures a
    width-scaled copy when the model is above the host's weight limit. Say which is which, so the
    two records are not compared as if they were the same model."""
    from harmony_ref.backends.host import DEFAULT_MAX_WEIGHT_MB, fit_to_host

    measured = fit_to_host(cfg, DEFAULT_MAX_WEIGHT_MB).spec.name
    return {
        "backend": "simulated",
        "model_predicted": cfg.spec.name,
        "host_backend_measures": measured
        if measured != cfg.spec.name
        else f"{measured} (same model: fits max_weight_mb={DEFAULT_MAX_WEIGHT_MB:g})",
    }


def _host_model_profile(config: RunConfig) -> str | None:
    """With --backend host, a --profile that is not a shipped phone (the host.toml written by
    `harmony-ref calibrate --backend host`) is this machine's calibrated model: the measurement is
    physics-checked against it and the record gets the model's error, `host_model_mape_pct`.
    A phone profile says nothing about this CPU and is used for neither."""
    if config.backend != "host":
        return None
    if _is_shipped(config.profile):  # a shipped host profile (its runtime is ours) is one too
        from harmony_ref.device.soc import load_soc

        return config.profile if load_soc(config.profile).default_runtime == HOST_RUNTIME else None
    return config.profile


HOST_RUNTIME = "harmony-ref-host"  # this project's runtime: a profile running it models this CPU


def _host(config: RunConfig):
    from harmony_ref.job.host_kernels import HOST_THREADS, host_metrics

    return host_metrics(config), {"threads": HOST_THREADS}


# The decoder the accuracy part scores when the config's model is not a checkpoint, and the
# part of the held-out corpus it scores (the full corpus is `harmony-ref accuracy`'s default).
ACCURACY_MODEL = "smollm2-135m"
ACCURACY_CONTEXT = 512
ACCURACY_CHUNKS = 2  # the first 2 of the held-out corpus's 12 chunks of 512: 510 scored tokens


def accuracy_model(config: RunConfig) -> str:
    """The decoder the accuracy part measures: the config's checkpoint, else SmolLM2-135M."""
    return config.checkpoint or ACCURACY_MODEL


def accuracy_inputs(config: dict) -> dict:
    """What the accuracy part reads of a record's config dict (RunConfig.to_dict()): the decoder
    it scores, the policy and the KV dtype. Not the preset model spec, the scenario or the phone:
    every point agreeing on these has the same accuracy (a sweep computes it once for them)."""
    model = config["model"] if "model_spec" in config else ACCURACY_MODEL  # a checkpoint's, inline
    return {
        "accuracy_model": model,
        "policy": config["policy"],
        "kv_dtype": config.get("kv_dtype", "fp16"),
    }


def lm_accuracy_part(config: RunConfig, chunks: int | None = ACCURACY_CHUNKS):
    """LM accuracy of the config's decoder (accuracy_model) under the config's policy and KV
    dtype against its FP32 reference, on the first `chunks` chunks of the held-out corpus
    (eval/lm_accuracy.py; the reference's log-probs come from the on-disk cache after the first
    run). Returns (metrics, facts for the record's part entry)."""
    from harmony_ref.eval.lm_accuracy import Corpus, lm_accuracy, lm_metrics
    from harmony_ref.runtime.loader import load_decoder_shared

    model = accuracy_model(config)
    acc = lm_accuracy(
        model,
        [(config.policy, config.kv_dtype)],
        Corpus.shipped("heldout"),
        ACCURACY_CONTEXT,
        chunks,
        loaded=load_decoder_shared(model),
    )
    r = acc.result
    facts = {
        "model": acc.model_label,
        "corpus": acc.corpus.label,
        "context": acc.context,
        "chunks": f"{r['chunks']} of {r['chunks_in_text']}",
        "scored_tokens": acc.scored_tokens,
        "reference_chunks_cached": r["reference_chunks_cached"],
    }
    return lm_metrics(acc), facts


def minilm_accuracy_part(config: RunConfig) -> Metrics:
    """MiniLM-L6 on its real weights under the run's policy. The policy applies as written:
    patterns that name LLM layers (q_proj, gate_proj, lm_head) match no MiniLM layer, so MiniLM's
    Linears take the policy's default format (int4-g128 -> every MiniLM Linear in int4-g128)."""
    from harmony_ref.eval.embedding import evaluate

    got = evaluate(config.policy)
    out = Metrics()
    for m in got:
        # MiniLM's own sizes must not be read as the LLM's (`weights_mb` of the predicted part).
        name = (
            f"minilm_{m.name}"
            if m.name.endswith("_mb")
            else ("accuracy_sentences" if m.name == "sentences" else m.name)
        )
        out.put(
            Metric(name, m.value, m.unit, m.direction, m.kind, m.samples, m.flags, m.description)
        )
    return out


def _accuracy(config: RunConfig):
    """The decoder's LM accuracy (lm_*), then MiniLM's sentence-embedding accuracy."""
    m, facts = lm_accuracy_part(config)
    m.update(minilm_accuracy_part(config))
    return m, facts


def _coldstart(config: RunConfig) -> Metrics:
    from harmony_ref.device.coldstart import coldstart_metrics
    from harmony_ref.device.runtime import config_profile

    return coldstart_metrics(config_profile(config), config)


def _thermal(config: RunConfig) -> Metrics:
    from harmony_ref.device.runtime import config_profile
    from harmony_ref.device.thermal import thermal_summary

    return thermal_summary(config_profile(config), config, minutes=10)


def _fidelity(config: RunConfig):
    """The fixture sets' errors, each naming the CPU it was measured on, and a `note` saying
    whether that is this machine; with a --profile that carries its own calibration (`harmony-ref
    calibrate`'s output), that profile's held-out error (fidelity_profile_mape_pct) in place of
    the host fixtures' (the llama.cpp and phone sets stay: no profile of this run stands in for
    them)."""
    from harmony_ref.backends.host_timing import cpu_id
    from harmony_ref.track import fidelity as fd

    own = fd.profile_calibration(config.profile)
    sets = tuple(s for s in fd.DEFAULT_SETS if not (own is not None and s == "host"))
    rows = fd.summary(fd.score(fd.collect(sets)))
    cpus, here = fd.fixture_cpus(sets), cpu_id()
    metrics = fd.fidelity_metrics(rows, cpus)
    note = fd.machine_note(cpus, here)
    facts = {
        "sets": sorted({r["set"] for r in rows}),
        "held_out_points": {r["set"]: r["scored"] for r in rows if r["phase"] == "all"},
        "fitted_points": {r["set"]: r["fitted"] for r in rows if r["phase"] == "all"},
        "measurements": "committed fixtures (harmony_ref/data/fidelity/), measured on "
        "fixture_cpus: independent of this run's config; MAPE on the held-out points only",
        "fixture_cpus": cpus,
        "this_cpu": here,
    }
    if own is not None:
        metrics.update(fd.profile_metrics(config.profile, own))
        facts["profile_calibration"] = config.profile
        note = (
            f"host: the held-out error of {config.profile}'s own calibration "
            f"(fidelity_profile_mape_pct), not the host fixtures'; {note}"
        )
    facts["note"] = note
    return metrics, facts


PARTS: list[Part] = [
    Part("predicted", "device metrics (backend)", _predicted),
    Part("host", "host kernels vs NumPy (timed)", _host),
    Part(
        "accuracy",
        "accuracy: SmolLM2-135M (or the checkpoint) and MiniLM-L6, real weights",
        _accuracy,
    ),
    Part("coldstart", "cold start (device model)", _coldstart),
    Part("thermal", "10-minute thermal summary", _thermal),
    Part("fidelity", "device model vs real runtimes (committed measurements)", _fidelity),
]


def part_names() -> list[str]:
    return [p.name for p in PARTS]


def metric_parts(record: Record) -> dict[str, str]:
    """Metric name -> the part of `record` that made it."""
    return {m: name for name, p in record.parts.items() for m in p.get("metrics", [])}


def parse_skip(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    unknown = [n for n in names if n not in part_names()]
    if unknown:
        raise ValueError(
            f"--skip: unknown part {unknown[0]!r}; parts are {', '.join(part_names())}"
        )
    return names


def run_part_info(part: Part, config: RunConfig) -> tuple[Metrics, dict]:
    """(metrics, extra information for the record's part entry)."""
    got = part.func(config)
    return got if isinstance(got, tuple) else (got, {})


def run_part(part: Part, config: RunConfig) -> Metrics:
    return run_part_info(part, config)[0]


def run_part_entry(part: Part, config: RunConfig, gone_fails: bool = False) -> tuple[Metrics, dict]:
    """Run one part as the job records it: (its metrics, its entry in the record's `parts`).
    An input out of reach is `unavailable`, anything else raised is `failed` (empty metrics).
    A phone that left mid-session (DeviceGone) stops the run, or with `gone_fails` (a lab
    sweep's point: the other phones go on) fails the part with the session's one-line reason."""
    from harmony_ref.lab.transport import DeviceGone

    t0 = time.perf_counter()
    try:
        got, info = run_part_info(part, config)
    except DeviceGone as e:  # the phone left mid-session: nothing of this part is recorded
        if not gone_fails:
            raise
        return Metrics(), {"status": "failed", "detail": str(e), "metrics": []}
    except AssetUnavailable as e:  # the registry is out of reach: not this code's failure
        return Metrics(), {
            "status": "unavailable",
            "detail": f"input not available: {e}",
            "metrics": [],
        }
    except Exception as e:  # noqa: BLE001 - one broken part must not hide the others
        return Metrics(), {
            "status": "failed",
            "detail": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc(limit=5),
            "metrics": [],
        }
    elapsed = time.perf_counter() - t0
    return got, {
        "status": "ok",
        "detail": f"{len(got)} metrics in {elapsed:.1f} s",
        "seconds": round(elapsed, 3),
        "metrics": got.names(),
        **info,
    }


def skipped_entry() -> dict:
    return {"status": "skipped", "detail": "skipped on request", "metrics": []}


def add_part(metrics: Metrics, part: Part, got: Metrics) -> None:
    """Add a part's metrics to the record's; a name two parts both make is a bug."""
    clash = [n for n in got.names() if n in metrics]
    if clash:
        raise RuntimeError(f"part {part.name} produced metric(s) already set: {clash}")
    metrics.update(got)


def _run_parts(
    config: RunConfig, skip, only, given: dict, progress, gone_fails: bool
) -> tuple[Metrics, dict[str, dict]]:
    """The job's loop: every part in order, skipped, given or run, its line on `progress`."""
    metrics = Metrics()
    parts: dict[str, dict] = {}
    for part in PARTS:
        if part.name in skip or (only is not None and part.name not in only):
            parts[part.name] = skipped_entry()
            continue
        task = progress.add_task(part.title, total=1)
        got, entry = (
            given[part.name] if part.name in given else run_part_entry(part, config, gone_fails)
        )
        parts[part.name] = entry
        status = entry["status"]
        if status == "ok":
            add_part(metrics, part, got)
            note = f"{len(got)} metrics"
        else:
            color = "yellow" if status == "unavailable" else "red"
            note = (
                f"[{color}]{'not available' if color == 'yellow' else 'failed'}[/] "
                f"({entry['detail']})"
            )
        progress.update(task, completed=1, description=f"{part.title}: {note}")
    return metrics, parts


class _NoProgress:
    """What run_job's loop asks of a progress display, doing nothing: a run without progress
    (a sweep's points) builds no console."""

    def add_task(self, *args, **kwargs) -> int:
        return 0

    def update(self, *args, **kwargs) -> None:
        pass


def run_job(
    config: RunConfig,
    skip: tuple[str, ...] = (),
    only: tuple[str, ...] | None = None,
    console=None,
    show_progress: bool = True,
    provenance: dict | None = None,
    given: dict[str, tuple[Metrics, dict]] | None = None,
    gone_fails: bool = False,
) -> Record:
    """Run every part not skipped and return the record (not yet written). `provenance`: one
    collected already (a sweep collects it once per batch of points), else collected here.
    `given`: part name -> (metrics, record entry) of a part run elsewhere (a sweep's shared
    parts, once per group of points: sweep/execute.py), recorded as if it had run here.
    `gone_fails`: a phone that leaves fails its part instead of stopping the run
    (run_part_entry)."""
    if show_progress:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=console or Console(stderr=True),
            transient=False,
        ) as progress:
            metrics, parts = _run_parts(config, skip, only, given or {}, progress, gone_fails)
    else:
        metrics, parts = _run_parts(config, skip, only, given or {}, _NoProgress(), gone_fails)
    return Record(
        config=record_config(config, parts),
        metrics=metrics,
        provenance=provenance or collect_provenance(),
        parts=parts,
    )


def record_config(config: RunConfig, parts: dict | None = None) -> dict:
    """The config as a record holds it: RunConfig.to_dict() plus the model the accuracy part's
    lm_* metrics were measured on, and, when the predicted part ran through a device session,
    the session named by what it measured (`backend_options.session_id`: the gate compares
    that, not the session file's name)."""
    out = config.to_dict()
    out["accuracy_model"] = accuracy_model(config)
    block = (parts or {}).get("predicted", {}).get("session")
    if block:
        from harmony_ref.lab.session_result import session_id

        out.setdefault("backend_options", {})["session_id"] = session_id(
            block, out["model"], out["policy"], out["scenario"]
        )
    return out


def measured_model(record: Record) -> str:
    """The model the record's device metrics were measured on: a host run of a model above the
    host's weight limit measures a width-scaled copy (`llama-3.2-3b/w4`), else the config's."""
    return record.parts.get("predicted", {}).get("measured_model") or record.config["model"]


def ran_parts(record: Record) -> tuple[str, ...]:
    return tuple(name for name, p in record.parts.items() if p.get("status") == "ok")


def remeasure_fn(record: Record) -> Callable[[str], Metric]:
    """A callable that re-measures one metric of `record` on this machine (by re-running the
    part that produced it), for the gate's confirm-on-rerun."""
    owner = metric_parts(record)
    by_name = {p.name: p for p in PARTS}
    config = RunConfig.from_dict(record.config, "the record being re-measured")
    reruns: dict[str, Metrics] = {}  # one re-run of a part serves every metric it makes

    def remeasure(metric: str) -> Metric:
        part = owner.get(metric)
        if part is None or part not in by_name:
            raise ValueError(
                f"cannot re-measure {metric}: the record does not say which part made it"
            )
        if part not in reruns:
            reruns[part] = run_part(by_name[part], config)
        return reruns[part][metric]

    return remeasure
