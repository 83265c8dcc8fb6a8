"""`harmony-ref calibrate --backend executorch`: the `executorch-xnnpack` runtime profile fitted
on ExecuTorch programs of our decoder (export --format pte) run on this host, and scored on runs
it never fitted.

    workloads = parse_program_workloads("fp32.pte:64:16:2;w4.pte:128:16:1;...")  # no run yet
    rows = measure_program_rows(workloads, repeats=3)      # the executorch backend per workload
    table, summary = fit_program_rows(rows, "host.soc.toml", "executorch-xnnpack", "et.toml")

A workload is PROGRAM:PROMPT:NEW[:THREADS]: the program (its manifest names the checkpoint and
the policy it was exported under), the prompt tokens, the new tokens (prompt + new is the
context a decode step attends to) and ExecuTorch's threadpool size (0: its default). Every third
workload (calibrate/phases.py HELD_OUT_EVERY) is held out, decided by its position in the list
before any run: the fit never sees it, and the summary reports its error. Each workload is timed
by the executorch backend (backends/executorch.py: ExecuTorch's Python runtime in a child
process, stats.h's phases, the median of the repeats), and gives two rows, its prefill time
(priced as a prefill of PROMPT tokens) and its decode step (priced as a step over PROMPT + 1 ..
PROMPT + NEW positions). The rows are all a fit reads, so a committed set of them
(results/executorch-calibration/) refits and rescores without torch or ExecuTorch.

On this host (no --profile) the SoC profile is this machine's own, measured by microbenchmarks
first (calibrate/host.py host_soc_profile) and written beside the runtime as OUT.soc.toml.
CARRIES_TO_PHONE says which fitted numbers mean something on a phone.
"""

from __future__ import annotations

from dataclasses import dataclass

from harmony_ref.calibrate.phases import HELD_OUT_EVERY

RUNTIME = "executorch-xnnpack"
# what the fit moves unless --params says: the fp32 prompt's matmul and the 8da4w prompt's int8
# one (XNNPACK's qd8 GEMMs: two kernels with their own achieved rates), a decode step's GEMVs,
# how much a second thread adds under XNNPACK's prompt kernels (1.1-1.35x on this host's 2
# vCPUs, where the SoC profile's Numba GEMMs measured 1.8x) and under its decode GEMVs (1.4x on
# the 8da4w step, which is compute-bound here: device/runtime.py gemv_thread_share). Without the
# per-program efficiencies and the thread shares, 45% held-out prefill error on the committed
# runs; without gemv_thread_share, or with the SoC profile's cache read taken from DRAM (its
# first measurement), the 8da4w step priced memory-bound at ~8 ms at 1 and 2 threads: 36.5%
# held-out decode error (docs/how-to/executorch.md). prompt_sync_us: what each op of a 2-thread
# prompt costs beyond its work (device/runtime.py [overhead] prompt_sync_us_per_thread): XNNPACK's
# 2-thread prompts here take ~25 ms more than their work at every length (an 8-token prompt 41
# ms at 2 threads, 12 at 1) while their work scales ~1.7x; one thread share could only split the
# difference (0.12), pricing short 2-thread prompts 32-38% fast and long ones 30-43% slow.
# attention_ns: what a decode step's attention costs per cached position in each layer
# (device/runtime.py [overhead] attention_ns_per_position): the program's custom_sdpa walks the
# filled positions of its fp32 cache per query head in portable C++, and the 8da4w step grows
# from 4.95 ms at 16 positions to 8.7 ms at 480 on one thread (9.2 us per position, 305 ns in
# each of 30 layers; the fp32 program 329 ns), where the roofline prices that growth at 0.34 ms
# (results/executorch-calibration/context-growth.json); heldout-3's long-context steps were
# priced 31-38% fast without it. Fitting it needs fit rows at long contexts (docs/how-to/
# executorch.md's workloads reach 496 positions).
PARAMS = (
    "matmul",
    "int8",
    "gemv",
    "thread_share",
    "gemv_thread_share",
    "prompt_sync_us",
    "attention_ns",
)
# what a program's run is priced as: the prompt's time and one decode step's
PHASES = ("prefill_ms", "decode_step_ms")
CARRIES_TO_PHONE = (
    "carries to a phone: the program's structure the fit priced (custom SDPA over the filled "
    "positions only, a dynamic KV cache, walked position by position at a cost per position; "
    "the head on the last position; one XNNPACK launch per op) and launch_us as an order of "
    "magnitude (per-op dispatch, on an x86 core here); "
    "the phone's own: its SoC profile's peaks and bandwidth and the efficiencies of "
    "XNNPACK's Arm kernels (matmul, gemv, memory), fitted on phone figures "
    "(calibrate --set phones), never on this host's x86 kernels"
)


@dataclass(frozen=True)
class ProgramWorkload:
    program: str  # a .pte from export --format pte
    prompt: int
    new: int
    threads: int = 0  # ExecuTorch's threadpool size; 0: its default
    model: str = ""  # from the program's manifest: the checkpoint it was exported from
    policy: str = ""  # and its policy

    @property
    def label(self) -> str:
        from pathlib import Path

        t = f"-t{self.threads}" if self.threads else ""
        return f"{Path(self.program).stem}-p{self.prompt}-n{self.new}{t}"


def parse_program_workloads(text: str, minimum: int = HELD_OUT_EVERY + 1) -> list[ProgramWorkload]:
    """`--workloads` of --backend executorch: PROGRAM:PROMPT:NEW[:THREADS] items separated by ';'
    (at least `minimum`; a calibration's 4: every third is held out), every program's manifest
    read and every scenario checked against its static cache before any run; ValueError in one
    line."""
    from harmony_ref.backends.executorch_runner import check_scenario
    from harmony_ref.runtime.pte import read_manifest

    out = []
    for item in (text or "").split(";"):
        if not item.strip():
            continue
        parts = item.strip().rsplit(":", 3)
        if len(parts) == 4 and not parts[0].endswith(".pte"):  # no THREADS: PROGRAM:PROMPT:NEW
            parts = item.strip().rsplit(":", 2)
        if len(parts) not in (3, 4) or not parts[0].endswith(".pte"):
            raise ValueError(
                f"--workloads item {item!r}: expected PROGRAM.pte:PROMPT:NEW[:THREADS]"
            )
        try:
            nums = [int(x) for x in parts[1:]]
        except ValueError as e:
            raise ValueError(f"--workloads item {item!r}: {e}") from e
        if nums[2:] and nums[2] < 0:
            raise ValueError(f"--workloads item {item!r}: threads {nums[2]} must be >= 0")
        manifest = read_manifest(parts[0])
        check_scenario(manifest, nums[0], nums[1], f"--workloads item {item!r}")
        out.append(
            ProgramWorkload(parts[0], *nums, model=manifest["model"], policy=manifest["policy"])
        )
    if len(out) < minimum:
        raise ValueError(
            f"--workloads: need at least {minimum}"
            + (" (every third is held out)" if minimum > 1 else "")
            + f", got {len(out)}"
        )
    return out


def check_workloads_disjoint(workloads, held=()) -> None:
    """Held out means held out: a --held-out file's workload that is also a --workloads item
    would be fitted and scored as one measurement; ValueError in one line, before any run.
    Programs compare by their resolved path."""
    from pathlib import Path

    def key(w):
        return (Path(w.program).resolve(), w.prompt, w.new, w.threads)

    fitted = {key(w) for w in workloads}
    for w in held:
        if key(w) in fitted:
            raise ValueError(
                f"--held-out item {w.label}: also a --workloads item, which is fitted "
                "(held out means held out: hold out another scenario)"
            )


def split_of(i: int) -> str:
    """The split of the i-th workload, by position alone."""
    return "score" if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else "fit"


def interleave(fit, held) -> tuple[list[ProgramWorkload], list[str]]:
    """One session's run order of fit workloads and a held-out set written down before
    (read_held_out_workloads), alternating while both last (fit, held, fit, ...), and each
    one's split: the held-out runs time beside the fit ones, so a drift of the machine between
    sessions (15-20% on this 2-vCPU guest) is not scored as model error."""
    order, splits = [], []
    for i in range(max(len(fit), len(held))):
        for group, split in ((fit, "fit"), (held, "score")):
            if i < len(group):
                order.append(group[i])
                splits.append(split)
    return order, splits


def measure_program_rows(
    workloads, repeats: int, progress=None, split: str = "", splits=()
) -> list[dict]:
    """Run each workload through the executorch backend: one row per phase (PHASES) with the
    workload, its split (by position, split_of; `split` names one for all: "score" for a set
    written down to be scored only, read_held_out_workloads; `splits` one per workload:
    interleave), the median and every repeat's value."""
    import dataclasses

    from harmony_ref.backends.executorch import ExecuTorchDevice
    from harmony_ref.calibrate.run import workload_run_config

    rows = []
    for i, w in enumerate(workloads):
        if progress:
            progress(w.label)
        cfg = workload_run_config(w.model, w.policy, w.prompt, w.new)
        cfg = dataclasses.replace(cfg, backend_options=(("program", str(w.program)),))
        m = ExecuTorchDevice(repeats=repeats, threads=w.threads).run(cfg)
        for metric in PHASES:
            rows.append(
                {
                    "id": f"w{i}:{w.label}:{metric}",
                    "split": splits[i] if splits else split or split_of(i),
                    "program": str(w.program),
                    "model": w.model,
                    "policy": w.policy,
                    "prompt_tokens": w.prompt,
                    "new_tokens": w.new,
                    "threads": w.threads,
                    "metric": metric,
                    "measured": m.metrics.value(metric),
                    "samples": list(m.metrics[metric].samples),
                }
            )
    return rows


def program_points(rows, profile: str, runtime: str) -> list:
    """The rows as calibrate/points.py Points on `profile` under `runtime`: a prefill priced on
    its prompt, a decode step on the generation after it (calibrate/phases.py phase_configs)."""
    from harmony_ref.calibrate.phases import Workload, phase_configs
    from harmony_ref.calibrate.points import Point

    out = []
    for r in rows:
        w = Workload(r["model"], r["policy"], r["prompt_tokens"], r["new_tokens"], r["threads"])
        _, phases = phase_configs(w, "executorch")
        out.append(
            Point(
                r["id"],
                "records",
                profile,
                runtime,
                r["threads"],
                phases[r["metric"]],
                r["metric"],
                r["measured"],
                r["split"],
                source=f"executorch backend, {r['program']}",
                samples=tuple(r.get("samples", ())),
            )
        )
    return out


def fit_program_rows(
    rows, profile: str, runtime: str, out, params=None, profile_label: str = ""
) -> tuple[list[dict], dict]:
    """`runtime` fitted on the fit rows on `profile`, written to `out`, scored on the held-out
    rows (calibrate/phases.py fit_runtime_on_points): (one row per point, the summary)."""
    from harmony_ref.calibrate.fit_runtime import shared_only
    from harmony_ref.calibrate.phases import fit_runtime_on_points
    from harmony_ref.device.runtime import load_profile, load_runtime

    base = shared_only(load_runtime(runtime))  # this host's numbers, no phone's entry
    load_profile(profile, base)  # the runtime must run on this SoC
    points = program_points(rows, profile, runtime)
    table, summary = fit_runtime_on_points(
        base,
        points,
        tuple(params or PARAMS),
        out,
        "executorch backend runs of .pte programs",
        profile_label or str(profile),
        f"harmony-ref calibrate --backend executorch --runtime {runtime}",
    )
    return table, {**summary, "backend": "executorch", "phone": CARRIES_TO_PHONE}


def read_held_out_workloads(path, programs=".") -> list[ProgramWorkload]:
    """The workloads of a held-out file (one --workloads item a line, '#' comments), program
    paths relative to the folder `programs`, each program's manifest read and scenario checked
    before any run: a set written down before it ran, scored and never fitted
    (score_program_rows)."""
    from pathlib import Path

    path, folder = Path(path), Path(programs)
    items = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            items.append(line if Path(line).is_absolute() else str(folder / line))
    if not items:
        raise ValueError(f"{path}: no workload (one PROGRAM.pte:PROMPT:NEW[:THREADS] a line)")
    try:
        return parse_program_workloads(";".join(items), minimum=1)
    except ValueError as e:  # the item named, and the file it came from
        raise ValueError(f"{path}: {str(e).removeprefix('--workloads ')}") from e


def score_program_rows(rows, profile: str, runtime) -> tuple[list[dict], dict]:
    """Rows measured to be scored only (their split "score"), priced by the fitted `runtime` (a
    path or RuntimeProfile) on `profile`, which was fitted without them: (one row per point,
    measured beside the model, the summary with the MAPE of prefill and of decode apart)."""
    from harmony_ref.calibrate.fit_runtime import point_rows
    from harmony_ref.device.runtime import load_runtime

    fitted = [r["id"] for r in rows if r["split"] != "score"]
    if fitted:
        raise ValueError(f"score_program_rows: rows {fitted[:3]} are not of split 'score'")
    rt = load_runtime(runtime)
    points = program_points(rows, profile, rt.name)
    table, mape = point_rows(rt, points)
    summary = {"runtime": str(runtime), "profile": str(profile), "mape_pct": mape}
    for metric, key in (("prefill_ms", "prefill"), ("decode_step_ms", "decode")):
        _, summary[f"{key}_mape_pct"] = point_rows(rt, [p for p in points if p.metric == metric])
    return table, summary


def calibrate_executorch(
    workloads,
    out,
    name: str,
    profile: str = "",
    runtime: str = RUNTIME,
    params=None,
    repeats: int = 3,
    progress=None,
    held_out=(),
) -> tuple[list[dict], list[dict], dict]:
    """Measure `workloads` (parse_program_workloads), fit and score `runtime` on `profile`, or
    on this machine's own SoC profile (measured first, written as OUT.soc.toml once the fit
    succeeded): (the measured rows, the table, the summary). `held_out` (a set written down
    before, read_held_out_workloads): every workload is fitted and the held-out ones, run
    interleaved with them in the same session (interleave), are scored."""
    from harmony_ref.calibrate.host import on_measured_host_soc

    order, splits = interleave(workloads, held_out) if held_out else (workloads, ())

    def measure():
        return measure_program_rows(order, repeats, progress, splits=splits)

    def fitted(rows, soc_path: str, soc_label: str = ""):
        if progress:  # the fit takes minutes (every start a least-squares run over the rows)
            fit_rows = sum(1 for r in rows if r["split"] != "score")
            progress(f"fitting {runtime} on {fit_rows} fit rows")
        table, summary = fit_program_rows(rows, soc_path, runtime, out, params, soc_label)
        return rows, table, summary

    if profile:
        return fitted(measure(), profile)

    def fit(soc_path: str, soc_label: str):
        return fitted(measure(), soc_path, soc_label)

    written_by = "microbenchmarks of `harmony-ref calibrate --backend executorch`"
    (rows, table, summary), soc = on_measured_host_soc(out, name, written_by, fit)
    summary["profile"] = str(soc)
    return rows, table, summary
