"""How far the device model is from real runtimes: predictions beside measurements, per set.

    points = collect(("host", "llama.cpp", "phones"))       # the committed measurements
    scored = score(points)                                  # each with its prediction
    table = summary(scored)                                 # MAPE per set, on the scored split only
    metrics = fidelity_metrics(table)                       # record metrics the gate tracks
    plot(scored, "fidelity.png")

Sets (calibrate/points.py Points): `host` (real SmolLM2 generations, calibrate/host_runs.py),
`llama.cpp` (llama-bench runs on this kind of machine, calibrate/llamacpp.py), `phones`
(published figures, calibrate/published.py: the calibration figures and the shipped held-out ones;
a file of your own adds its figures) and
`records` (run records of `measure` / `run --backend command`, all scored). Every point is
predicted by SimulatedDevice on its SoC profile under its runtime profile.

Whose machine: the host and llama.cpp sets were measured on one machine (their manifests'
`cpu_id`); their metrics say which, and `machine_note` says whether it is the CPU this runs on
(backends/host_timing.py cpu_id): on another CPU those numbers are the method's error on the
fixtures' machine, not on this one. A `--profile` with its own [calibration] (what `harmony-ref
calibrate` writes on the machine it runs on) has its held-out error as a metric of its own,
`fidelity_profile_mape_pct` (`profile_calibration`, `profile_metrics`).

Held out means held out: a point is `fit` or `score` by its data file, and a runtime profile's
[calibration] must not list a scored point among those it was fitted on (ValueError if it does).
MAPE is taken on the scored points only; the fit points' error is shown apart (how well the
calibration reproduces what it saw). For the sets measured in several sessions, the MAPE of
the predictions against each session alone gives the run-to-run spread of the MAPE itself: the
gate's tolerance on these metrics derives from it (harmony_ref/data/gate_tolerances.toml).
"""

from __future__ import annotations

import math
import statistics

from harmony_ref.calibrate.points import Point, Scored
from harmony_ref.metrics import Metrics

SETS = ("host", "llama.cpp", "phones", "records")
DEFAULT_SETS = ("host", "llama.cpp", "phones")
FIXTURE_SETS = ("host", "llama.cpp")  # measured on one machine, the one their manifest names
PHASE_OF = {
    "prefill_ms": "prefill",
    "prefill_tokens_per_s": "prefill",
    "ttft_ms": "prefill",
    "decode_step_ms": "decode",
    "decode_tokens_per_s": "decode",
    "e2e_ms": "e2e",
    "peak_memory_mb": "memory",
    "energy_per_token_mj": "energy",
}
BAND = 0.25  # the plot's +-25% band


def collect(
    sets=DEFAULT_SETS, figures=None, records=(), records_runtime: str | None = None
) -> list[Point]:
    """The points of the named sets; `figures`: a figures file whose figures join the phones set
    (beside the shipped calibration and held-out figures); `records`: run record paths (set
    records)."""
    from harmony_ref.calibrate.published import HELDOUT_FIGURES, figure_points, load_figures

    unknown = [s for s in sets if s not in SETS]
    if unknown:
        raise ValueError(f"--sets: unknown set(s) {unknown}; known {list(SETS)}")
    out: list[Point] = []
    if "host" in sets:
        from harmony_ref.calibrate.host_runs import host_points

        out += host_points()
    if "llama.cpp" in sets:
        from harmony_ref.calibrate.llamacpp import llamacpp_points

        out += llamacpp_points()
    if "phones" in sets:
        shipped = figure_points(load_figures()) + figure_points(
            load_figures(shipped=HELDOUT_FIGURES)
        )
        out += shipped
        if figures:
            ids = {p.id for p in shipped}
            extra = figure_points(load_figures(figures))
            same = next((p.id for p in extra if p.id in ids), None)
            if same is not None:  # it would silently replace or be dropped: say so
                raise ValueError(
                    f"--figures {figures}: figure id {same!r} is a shipped figure's id; "
                    "give it another"
                )
            out += extra
    if records or "records" in sets:
        out += record_points(records, records_runtime)
    return out


def record_points(paths, runtime: str | None) -> list[Point]:
    """Measured phases of run records (`measure`, `run --backend command|host`), scored against
    the record's profile under `runtime` (default: the profile's own); and a phone's measured
    energy per token (`device_energy_per_token_mj`, a session on battery) against the model's
    decode energy above the idle power that session measured (calibrate/points.py
    decode_energy_mj)."""
    from pathlib import Path

    from harmony_ref.calibrate.points import ENERGY_METRIC
    from harmony_ref.config import RunConfig
    from harmony_ref.device.soc import load_soc
    from harmony_ref.track.history import session_block
    from harmony_ref.track.record import load_record

    out = []
    for path in paths:
        rec = load_record(path)
        cfg = RunConfig.from_dict(rec.config, str(path))
        try:  # scored against its profile: an unknown one is named with the record
            load_soc(cfg.profile)
        except ValueError as e:
            from harmony_ref._format import did_you_mean
            from harmony_ref.device.soc import shipped_profiles

            hint = did_you_mean(cfg.profile, shipped_profiles())
            why = (
                f"not a profile file or a shipped profile{hint}"
                if not Path(cfg.profile).exists()
                else str(e)
            )
            raise ValueError(
                f"--records {path}: field 'config.profile' = {cfg.profile!r}: {why}"
            ) from None
        for metric in ("prefill_ms", "decode_step_ms", "peak_memory_mb"):
            if metric in rec.metrics and rec.metrics[metric].measured:
                out.append(
                    Point(
                        f"{path}:{metric}",
                        "records",
                        cfg.profile,
                        runtime or "",
                        0,
                        cfg,
                        metric,
                        rec.metrics.value(metric),
                        "score",
                        source=str(path),
                    )
                )
        energy = (
            rec.metrics["device_energy_per_token_mj"]
            if ("device_energy_per_token_mj" in rec.metrics)
            else None
        )
        idle = (session_block(rec.to_dict()) or {}).get("power", {}).get("idle_power_w")
        if energy is not None and idle is not None and energy.value > 0:
            out.append(
                Point(
                    f"{path}:{ENERGY_METRIC}",
                    "records",
                    cfg.profile,
                    runtime or "",
                    0,
                    cfg,
                    ENERGY_METRIC,
                    energy.value,
                    "score",
                    source=str(path),
                    samples=tuple(energy.samples),
                    idle_power_w=float(idle),
                )
            )
    return out


def _fitted_ids(point: Point) -> set[str]:
    from harmony_ref.device.runtime import load_runtime
    from harmony_ref.device.soc import load_soc

    name = point.runtime or load_soc(point.profile).default_runtime
    if not name:
        return set()
    cal = load_runtime(name).calibration
    return set(cal.fitted_on) if cal is not None else set()


def score(points: list[Point]) -> list[Scored]:
    """Each point with its prediction. Refuses a scored point its runtime was fitted on, or
    that is the same measurement as a fitted point under another id (calibrate/points.py
    check_disjoint), and a point marked "fit" its runtime was not fitted on (it would be
    reported as fitted, its error as the calibration's, when nothing was fitted on it)."""
    from harmony_ref.calibrate.points import check_disjoint

    fitted_ids = [_fitted_ids(p) for p in points]
    for p, fitted in zip(points, fitted_ids):
        if p.split == "score" and p.id in fitted:
            raise ValueError(
                f"point {p.id} is held out (split 'score') but runtime "
                f"{p.runtime}'s [calibration] fitted_on lists it: held out means held out"
            )
        if p.split == "fit" and p.id not in fitted:
            raise ValueError(
                f"point {p.id} has split 'fit' but runtime {_runtime_name(p)} was not "
                "fitted on it: give it split 'score', or the runtime fitted on it"
            )
    check_disjoint(
        [p for p in points if p.split == "fit"],
        [p for p in points if p.split == "score"],
        "fidelity",
    )
    return [Scored(p, p.predicted(), fitted=p.id in f) for p, f in zip(points, fitted_ids)]


def _mape(rows: list[Scored]) -> float | None:
    return statistics.mean(r.ape_pct for r in rows) if rows else None


def _session_spread(rows: list[Scored]) -> float | None:
    """max - min over sessions of the MAPE against one session's measurements alone."""
    per = [r for r in rows if len(r.point.samples) >= 2]
    if not per or len(per) != len(rows):
        return None
    n = min(len(r.point.samples) for r in per)
    mapes = [
        statistics.mean(
            abs(r.predicted - r.point.samples[i]) / r.point.samples[i] * 100 for r in per
        )
        for i in range(n)
    ]
    return max(mapes) - min(mapes)


def summary(scored: list[Scored]) -> list[dict]:
    """One row per set (and per set and phase): points fitted / scored, MAPE on each split,
    median and largest absolute error on the scored split, the largest factor off, spread."""
    rows = []
    for s in SETS:
        mine = [r for r in scored if r.point.set == s]
        if not mine:
            continue
        groups = [("all", mine)] + [
            (ph, [r for r in mine if PHASE_OF[r.point.metric] == ph])
            for ph in ("prefill", "decode", "memory", "energy")
        ]
        for phase, rs in groups:
            if not rs:
                continue
            fit = [r for r in rs if r.point.split == "fit"]
            held = [r for r in rs if r.point.split == "score"]
            factor = max(
                (max(r.predicted / r.point.measured, r.point.measured / r.predicted) for r in held),
                default=None,
            )
            rows.append(
                {
                    "set": s,
                    "phase": phase,
                    "fitted": len(fit),
                    "scored": len(held),
                    "fit_mape_pct": _mape(fit),
                    "mape_pct": _mape(held),
                    "median_ape_pct": statistics.median(r.ape_pct for r in held) if held else None,
                    "max_ape_pct": max((r.ape_pct for r in held), default=None),
                    "fit_max_ape_pct": max((r.ape_pct for r in fit), default=None),
                    "max_factor": factor,
                    "session_spread_pct": _session_spread(held) if held else None,
                }
            )
    return rows


METRIC_NAMES = {  # (set, phase, column) -> record metric
    ("host", "all", "mape_pct"): "fidelity_host_mape_pct",
    ("host", "prefill", "mape_pct"): "fidelity_host_prefill_mape_pct",
    ("host", "decode", "mape_pct"): "fidelity_host_decode_mape_pct",
    ("llama.cpp", "all", "mape_pct"): "fidelity_llamacpp_mape_pct",
    ("phones", "all", "fit_max_ape_pct"): "fidelity_phones_calibration_max_error_pct",
    ("phones", "all", "mape_pct"): "fidelity_phones_mape_pct",
    ("phones", "all", "median_ape_pct"): "fidelity_phones_median_error_pct",
    ("phones", "all", "max_factor"): "fidelity_phones_max_factor",
}


def fixture_cpus(sets=FIXTURE_SETS) -> dict[str, str]:
    """{set: the CPU its committed measurements were taken on}, for the fixture sets in `sets`
    (each manifest's cpu_id; "an unrecorded CPU" where a manifest has none)."""
    from harmony_ref.calibrate.host_runs import load_host_manifest
    from harmony_ref.calibrate.llamacpp import load_llamacpp_manifest

    loaders = {"host": load_host_manifest, "llama.cpp": load_llamacpp_manifest}
    return {s: loaders[s]().cpu_id or "an unrecorded CPU" for s in FIXTURE_SETS if s in sets}


def machine_note(cpus: dict[str, str], here: str) -> str:
    """One line: on which CPU the fixture sets were measured, and whether that is `here` (the
    CPU this runs on); "" without fixture sets."""
    if not cpus:
        return ""
    by_cpu: dict[str, list[str]] = {}
    for s, cpu in cpus.items():
        by_cpu.setdefault(cpu, []).append(s)
    return "; ".join(
        f"{' and '.join(sets)} fixtures measured on "
        + (f"this machine's CPU, {cpu}" if cpu == here else f"{cpu}, not on this machine's {here}")
        for cpu, sets in by_cpu.items()
    )


def fidelity_metrics(rows: list[dict], cpus: dict[str, str] | None = None) -> Metrics:
    """The errors as record metrics (lower is better), for the gate; `cpus` (fixture_cpus):
    each fixture set's metric says which CPU its measurements are of."""
    cpus = fixture_cpus() if cpus is None else cpus
    m = Metrics()
    for r in rows:
        for (s, phase, col), name in METRIC_NAMES.items():
            if r["set"] == s and r["phase"] == phase and r[col] is not None:
                on = f" on {cpus[s]}" if s in cpus else ""
                split = (
                    "calibration (fit) figures"
                    if col.startswith("fit")
                    else f"{r['scored']} held-out points"
                )
                m.add(
                    name,
                    float(r[col]),
                    "x" if col == "max_factor" else "%",
                    "lower",
                    "exact",
                    description=f"device model vs measured, {s} set, {phase}: {col} over {split} "
                    f"(committed measurements{on}; harmony-ref fidelity)",
                )
    return m


def profile_calibration(profile: str):
    """The --profile's own CalibrationInfo (device/soc.py) when `profile` is a file with a
    calibration of its own: its [calibration] section, or its runtime file's, as `harmony-ref
    calibrate` writes them on the machine it runs on. None for a shipped profile, a profile
    without one, and a profile whose calibration is a shipped runtime's (the fixtures')."""
    from harmony_ref.device.runtime import load_profile, load_runtime, shipped_runtimes
    from harmony_ref.device.soc import load_soc, shipped_profiles

    if profile in shipped_profiles():
        return None
    runtime = load_soc(profile).default_runtime
    if runtime in shipped_runtimes():
        rc = load_runtime(runtime).calibration
        if rc is not None and not math.isnan(rc.held_out_mape_pct):
            return None  # apply_runtime gives the shipped runtime's: the fixtures' error
    return load_profile(profile).calibration


def profile_metrics(profile: str, calibration) -> Metrics:
    """`fidelity_profile_mape_pct`: the held-out error the --profile's own calibration recorded
    (a different quantity from the fixture sets' errors, so a different name: the gate never
    compares the two)."""
    mape, basis = calibration.model_mape_pct
    m = Metrics()
    m.add(
        "fidelity_profile_mape_pct",
        float(mape),
        "%",
        "lower",
        "exact",
        description=f"device model vs measured on the machine {profile} was calibrated on: "
        f"{basis}, calibrated {calibration.fitted_at or 'at an unrecorded time'} "
        f"(that profile's own [calibration])",
    )
    return m


def table_rows(scored: list[Scored]) -> list[dict]:
    return [
        {
            "set": r.point.set,
            "id": r.point.id,
            "split": r.point.split,
            "runtime": r.point.runtime,
            "profile": r.point.profile,
            "metric": r.point.metric,
            "measured": r.point.measured,
            "predicted": r.predicted,
            "error_pct": r.error_pct,
            "differs_in": r.point.note,
        }
        for r in scored
    ]


def plot(scored: list[Scored], path) -> None:
    """Predicted vs measured, log axes, y = x and a +-25% band; one marker per runtime, one
    colour per set, fit points hollow and scored ones filled (track/plot_style.py house style)."""
    from harmony_ref.track.plot_style import PALETTE, REFERENCE_COLOUR, figure, save_png, style

    markers = ("o", "s", "^", "D", "v", "P", "X", "*")
    runtimes = sorted({_runtime_name(r.point) for r in scored})
    sets = [s for s in SETS if any(r.point.set == s for r in scored)]
    with style():
        fig, ax = figure(height_px=1000)
        vals = [v for r in scored for v in (r.predicted, r.point.measured) if v > 0]
        lo, hi = min(vals) / 2, max(vals) * 2
        xs = [lo, hi]
        ax.fill_between(
            xs,
            [x * (1 - BAND) for x in xs],
            [x * (1 + BAND) for x in xs],
            color=REFERENCE_COLOUR,
            alpha=0.12,
            lw=0,
            label="±25%",
        )
        ax.plot(xs, xs, color=REFERENCE_COLOUR, lw=1.2, label="y = x")
        for r in scored:
            rt = _runtime_name(r.point)
            colour = PALETTE[sets.index(r.point.set) % len(PALETTE)]
            marker = markers[runtimes.index(rt) % len(markers)]
            ax.scatter(
                r.point.measured,
                r.predicted,
                s=70,
                marker=marker,
                facecolors=colour if r.point.split == "score" else "none",
                edgecolors=colour,
                linewidths=1.6,
                zorder=3,
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_aspect("equal")
        ax.set_xlabel("measured (ms, tokens/s or MB, as each point's metric)")
        ax.set_ylabel("predicted by the device model (same metric)")
        ax.grid(True, which="both", axis="both", alpha=0.25)
        ax.set_title("Device model fidelity: filled = held out (scored), hollow = fitted")
        from matplotlib.lines import Line2D

        handles = [
            Line2D(
                [],
                [],
                marker=markers[i % len(markers)],
                ls="",
                color="#333333",
                markerfacecolor="#333333",
                label=rt,
            )
            for i, rt in enumerate(runtimes)
        ]
        handles += [
            Line2D([], [], marker="o", ls="", color=PALETTE[i % len(PALETTE)], label=f"set: {s}")
            for i, s in enumerate(sets)
        ]
        handles += ax.get_legend_handles_labels()[0]
        ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
        save_png(fig, path)


def _runtime_name(p: Point) -> str:
    if p.runtime:
        return p.runtime
    from harmony_ref.device.soc import load_soc

    return load_soc(p.profile).default_runtime or load_soc(p.profile).name


def finite(v):
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def markdown_tables(scored: list[Scored], rows: list[dict]) -> str:
    """The README's three tables (host, llama.cpp, published phones) and each set's MAPE line,
    as `harmony-ref fidelity --markdown` prints them (tests/test_readme_fidelity.py holds the
    README to them)."""
    out = []
    by_set = {s: [r for r in scored if r.point.set == s] for s in ("host", "llama.cpp", "phones")}
    host = by_set["host"]
    if host:
        out += [
            "| run | split | differs from the fit runs in | prefill ms: measured / predicted (error) | "
            "decode step ms: measured / predicted (error) |",
            "|---|---|---|---|---|",
        ]
        runs: dict[str, dict] = {}
        for r in host:
            run_id = r.point.id.rsplit(":", 1)[0]
            runs.setdefault(run_id, {"split": r.point.split, "note": r.point.note})[
                r.point.metric
            ] = r
        for run_id, d in runs.items():
            cells = [
                f"{_num(d[m].point.measured)} / {_num(d[m].predicted)} ({d[m].error_pct:+.1f}%)"
                for m in ("prefill_ms", "decode_step_ms")
            ]
            out.append(
                f"| {run_id} | {d['split']} | {d['note'] or '-'} | {cells[0]} | {cells[1]} |"
            )
        out += ["", _mape_line(rows, "host"), ""]
    llama = by_set["llama.cpp"]
    if llama:
        out += [
            "| llama-bench run | split | differs in | metric | measured | predicted | error |",
            "|---|---|---|---|---|---|---|",
        ]
        out += [
            f"| {r.point.id} | {r.point.split} | {r.point.note or '-'} | {r.point.metric} | "
            f"{_num(r.point.measured)} | {_num(r.predicted)} | {r.error_pct:+.1f}% |"
            for r in llama
        ]
        out += ["", _mape_line(rows, "llama.cpp"), ""]
    phones = by_set["phones"]
    if phones:
        out += [
            "| published figure | split | phone (SoC profile) | runtime | metric | published | "
            "predicted | error |",
            "|---|---|---|---|---|---|---|---|",
        ]
        out += [
            f"| {r.point.id} | {r.point.split} | {r.point.note} ({r.point.profile}) | "
            f"{r.point.runtime} | {r.point.metric} | {_num(r.point.measured)} | "
            f"{_num(r.predicted)} | {r.error_pct:+.1f}% |"
            for r in phones
        ]
        out += ["", _mape_line(rows, "phones")]
        whole = next((r for r in rows if r["set"] == "phones" and r["phase"] == "all"), None)
        if whole and whole["scored"]:
            out += [
                "",
                f"phones, held out: median absolute error {whole['median_ape_pct']:.1f}%, "
                f"largest {whole['max_ape_pct']:.1f}% (a factor {whole['max_factor']:.2f}), over "
                f"{whole['scored']} figures no runtime was fitted on.",
            ]
    return "\n".join(out).rstrip() + "\n"


def _mape_line(rows: list[dict], s: str) -> str:
    parts = []
    for r in rows:
        if r["set"] != s or r["phase"] == "memory":
            continue
        held = (
            f"held-out MAPE {r['mape_pct']:.1f}% over {r['scored']}"
            if r["scored"]
            else "no held-out points"
        )
        fit = (
            f"fit MAPE {r['fit_mape_pct']:.1f}% over {r['fitted']}"
            if r["fitted"]
            else "nothing fitted"
        )
        parts.append(f"{r['phase']}: {held}, {fit}")
    return f"{s}: " + "; ".join(parts) + "."
