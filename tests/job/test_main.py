"""`harmony-ref run` and the gate end to end: records written, parts reported honestly, and a
real regression (a worse device profile in a temp copy) failing the gate with exit 1."""

import json
from pathlib import Path

import pytest

from harmony_ref.cli import main
from harmony_ref.job import main as job
from harmony_ref.track.record import load_record

ALL_PARTS = ",".join(job.part_names())


def test_run_all_skipped_writes_a_record(tmp_path, capsys):
    assert main(["run", "--skip", ALL_PARTS, "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    (path,) = tmp_path.glob("run-*.json")
    assert f"record: {path}" in out
    rec = load_record(path)
    assert {p["status"] for p in rec.parts.values()} == {"skipped"}
    assert rec.config["model"] == "llama-3.2-3b" and rec.config["backend"] == "simulated"


def test_run_json(tmp_path, capsys):
    assert main(["run", "--skip", ALL_PARTS, "--out-dir", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert Path(data["record"]).exists() and data["schema_version"] == 1


def test_run_bad_arguments_exit_2(tmp_path, capsys):
    assert main(["run", "--skip", "predicted,bogus", "--out-dir", str(tmp_path)]) == 2
    assert "unknown part 'bogus'" in capsys.readouterr().err
    assert main(["run", "--batch", "0", "--out-dir", str(tmp_path)]) == 2


def test_unavailable_part_is_reported_not_faked(tmp_path, monkeypatch):
    from harmony_ref.checkpoint.assets import AssetUnavailable

    def offline(config):
        raise AssetUnavailable("could not reach the package registry to download the-weights")

    monkeypatch.setattr(job, "PARTS", [job.Part("accuracy", "accuracy", offline)])
    rec = job.run_job(job_config(), show_progress=False)
    assert rec.parts["accuracy"]["status"] == "unavailable"
    assert "could not reach the package registry" in rec.parts["accuracy"]["detail"]
    assert len(rec.metrics) == 0


def test_a_part_with_a_broken_import_fails_loudly(tmp_path, monkeypatch):
    """Parts are never skipped as 'not in this checkout': a missing module is a failure."""

    def broken_import(config):
        import harmony_ref.no_such_module  # noqa: F401

    monkeypatch.setattr(job, "PARTS", [job.Part("predicted", "predicted", broken_import)])
    rec = job.run_job(job_config(), show_progress=False)
    assert rec.parts["predicted"]["status"] == "failed"
    assert "No module named 'harmony_ref.no_such_module'" in rec.parts["predicted"]["detail"]


def test_failed_part_exits_1(tmp_path, monkeypatch):
    def broken(config):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(job, "PARTS", [job.Part("predicted", "predicted", broken)])
    assert main(["run", "--out-dir", str(tmp_path)]) == 1
    # nothing succeeded: the record is kept under failed/, not where `--current latest` looks
    assert not list(tmp_path.glob("run-*.json"))
    rec = load_record(next((tmp_path / "failed").glob("run-*.json")))
    assert rec.parts["predicted"]["status"] == "failed"
    assert "kernel exploded" in rec.parts["predicted"]["detail"]


def test_a_phone_that_leaves_stops_the_run_or_with_gone_fails_fails_its_part(monkeypatch):
    """DeviceGone stops `run` (nothing recorded); a lab sweep's point (run_job's gone_fails)
    records the part failed with the session's one line, and the parts after it still run."""
    from harmony_ref.lab.transport import DeviceGone

    def gone(config):
        raise DeviceGone("hdc device LAB0HDC000001 disappeared during the benchmark")

    def fine(config):
        from harmony_ref.metrics import Metrics

        return Metrics()

    parts = [job.Part("predicted", "predicted", gone), job.Part("host", "host", fine)]
    monkeypatch.setattr(job, "PARTS", parts)
    with pytest.raises(DeviceGone):
        job.run_job(job_config(), show_progress=False)
    rec = job.run_job(job_config(), show_progress=False, gone_fails=True)
    assert rec.parts["predicted"] == {
        "status": "failed",
        "detail": "hdc device LAB0HDC000001 disappeared during the benchmark",
        "metrics": [],
    }
    assert rec.parts["host"]["status"] == "ok"


def job_config():
    from harmony_ref.config import RunConfig

    return RunConfig.from_names("llama-3.2-3b", "int4-g128", profile="harmony-flagship")


# --- the gate against fresh runs, with real changes to a profile or a policy -----------------

SHIPPED = Path(__file__).resolve().parents[2] / "harmony_ref"


def _baseline_with(tmp_path, profile: str, policy: str = "int4-g128") -> Path:
    runs = tmp_path / "runs"
    skip = ",".join(n for n in job.part_names() if n != "predicted")
    args = ["run", "--profile", profile, "--policy", policy, "--out-dir", str(runs)]
    if skip:
        args += ["--skip", skip]
    assert main(args) == 0
    (record,) = runs.glob("run-*.json")
    baseline = tmp_path / "baseline.json"
    assert (
        main(["gate", "--baseline", str(baseline), "--current", str(record), "--update-baseline"])
        == 0
    )
    return baseline


def test_gate_fresh_run_unchanged_passes_and_worse_profile_fails(tmp_path, capsys):
    profile = tmp_path / "phone.toml"
    text = (SHIPPED / "device" / "profiles" / "harmony-flagship.toml").read_text()
    profile.write_text(text)
    baseline = _baseline_with(tmp_path, str(profile))
    capsys.readouterr()
    assert main(["gate", "--baseline", str(baseline), "--out-dir", str(tmp_path / "runs")]) == 0
    assert "## harmony-ref gate: PASS" in capsys.readouterr().out

    # A real regression: the phone's DRAM gets slower, so decode gets slower.
    assert "dram_bandwidth_gbps = 68.3" in text
    profile.write_text(text.replace("dram_bandwidth_gbps = 68.3", "dram_bandwidth_gbps = 51.2"))
    summary = tmp_path / "summary.md"
    assert (
        main(
            [
                "gate",
                "--baseline",
                str(baseline),
                "--out-dir",
                str(tmp_path / "runs"),
                "--summary",
                str(summary),
            ]
        )
        == 1
    )
    out = capsys.readouterr().out
    assert "## harmony-ref gate: FAIL" in out and summary.read_text() == out
    row = next(line for line in out.splitlines() if line.startswith("| `decode_tokens_per_s`"))
    assert "REGRESSION" in row


def test_gate_worse_policy_fails(tmp_path, capsys):
    policy = tmp_path / "mine.toml"
    policy.write_text('name = "mine"\ndefault = "int4-g128"\n')
    baseline = _baseline_with(tmp_path, "harmony-flagship", str(policy))
    policy.write_text('name = "mine"\ndefault = "int4-g128"\nkeep_fp16_layers = ["down_proj"]\n')
    capsys.readouterr()
    assert main(["gate", "--baseline", str(baseline), "--out-dir", str(tmp_path / "runs")]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in next(
        line for line in out.splitlines() if line.startswith("| `weights_mb`")
    )
    # ... and putting the policy back passes again (the failing run did not move the baseline).
    policy.write_text('name = "mine"\ndefault = "int4-g128"\n')
    assert main(["gate", "--baseline", str(baseline), "--out-dir", str(tmp_path / "runs")]) == 0


# --- the host part, and the gate's confirm-on-rerun through the real re-measure ----------------


def _host_record(policy="int4-g32"):
    from harmony_ref.config import RunConfig

    config = RunConfig.from_names(
        "all-minilm-l6",
        policy,
        prompt_tokens=128,
        new_tokens=0,
        context_tokens=128,
        profile="harmony-flagship",
    )
    return job.run_job(config, only=("host",), show_progress=False)


def test_host_part_measures_with_samples():
    from harmony_ref.job.host_kernels import ROUNDS

    rec = _host_record()
    assert rec.parts["host"]["status"] == "ok", rec.parts["host"]
    for name in (
        "host_gemv_ms",
        "host_gemv_speedup_x",
        "host_norm_fused_ms",
        "host_norm_fusion_speedup_x",
    ):
        m = rec.metrics[name]
        assert m.kind == "measured" and len(m.samples) == ROUNDS and m.value > 0
    assert "int4-g32" in rec.metrics["host_gemv_ms"].description
    assert "1536x384" in rec.metrics["host_gemv_ms"].description  # MiniLM intermediate.dense


def test_host_part_narrows_a_group_that_does_not_divide_k():
    """SmolLM2's up_proj has K = 576: int4-g128 is stored as g64 there (quant/policy.py
    format_for_rows), as the runtime stores it; the host part used to quantize with g128 and
    fail, so the tutorial's `run --backend host --model smollm2-135m` exited 1."""
    from harmony_ref.config import RunConfig
    from harmony_ref.job.host_kernels import host_metrics

    m = host_metrics(RunConfig.from_names("smollm2-135m", "int4-g128"), rounds=1)
    assert "1536x576" in m["host_gemv_ms"].description
    assert "int4-g64" in m["host_gemv_ms"].description


def test_confirm_on_rerun_uses_the_real_remeasure():
    """A baseline claiming a 1000x faster kernel: the current run is worse beyond doubt, the
    gate re-measures by re-running the host part (once), and the regression stands. (1000x
    because tiny MiniLM-sized kernels on a loaded 2-core machine swing by 100x.)"""
    from harmony_ref.metrics import Metric
    from harmony_ref.track import gate
    from harmony_ref.track.record import Record

    current = _host_record()
    baseline = Record(
        current.config,
        type(current.metrics)(dict(current.metrics.items)),
        current.provenance,
        current.parts,
    )
    for name in baseline.metrics.names():
        m = baseline.metrics[name]
        if m.direction != "none":
            f = 1000.0 if m.direction == "higher" else 0.001
            # a tight cloud 1000x better than the current value
            samples = tuple(m.value * f * (1 + 0.001 * i) for i in range(len(m.samples)))
            baseline.metrics.put(Metric(m.name, m.value * f, m.unit, m.direction, m.kind, samples))
    calls, rerun_parts = [], []
    real_run_part = job.run_part

    def counting_run_part(part, config):
        rerun_parts.append(part.name)
        return real_run_part(part, config)

    job.run_part = counting_run_part
    real = job.remeasure_fn(current)

    def remeasure(name):
        calls.append(name)
        return real(name)

    try:
        report = gate.compare(baseline, current, remeasure=remeasure)
    finally:
        job.run_part = real_run_part
    regressed = {r.metric for r in report.regressions}
    assert "host_gemv_speedup_x" in regressed, "\n".join(
        f"{r.metric} {r.status} {r.verdict}" for r in report.rows
    )
    assert regressed <= set(calls)
    assert all("confirmed on rerun" in r.verdict for r in report.regressions)
    assert len(rerun_parts) == 1  # one re-run of the host part serves every metric it made


def test_command_backend_run_and_gate(tmp_path, capsys):
    """--backend command with the fake phone (tests/fake_device/phone.py): the record keeps the
    command, so a fresh gate run re-runs the same benchmark."""
    import sys

    fake = Path(__file__).parents[1] / "fake_device" / "phone.py"
    cmd = f"{sys.executable} {fake} --model llama-3.2-3b --policy int4-g128 --prompt 512 --new 128"
    skip = ",".join(n for n in job.part_names() if n != "predicted")
    runs = tmp_path / "runs"
    assert (
        main(
            [
                "run",
                "--backend",
                "command",
                "--command",
                cmd,
                "--command-format",
                "llama-bench",
                "--skip",
                skip,
                "--out-dir",
                str(runs),
            ]
        )
        == 0
    )
    (path,) = runs.glob("run-*.json")
    rec = load_record(path)
    assert rec.config["backend_options"] == {"command": cmd, "format": "llama-bench"}
    assert rec.metrics["decode_tokens_per_s"].kind == "measured"
    assert "backend_provenance" in rec.parts["predicted"]
    baseline = tmp_path / "baseline.json"
    assert (
        main(["gate", "--baseline", str(baseline), "--current", str(path), "--update-baseline"])
        == 0
    )
    capsys.readouterr()
    assert main(["gate", "--baseline", str(baseline), "--out-dir", str(runs)]) == 0
    assert "## harmony-ref gate: PASS" in capsys.readouterr().out
    assert main(["run", "--backend", "command", "--out-dir", str(runs)]) == 2


def test_committed_baseline_is_a_full_default_run():
    """results/baseline.json (what `tox -e nightly` gates against) is a valid record of
    `harmony-ref run`'s default config with every part run."""
    from harmony_ref.commands.run import DEFAULTS

    base = load_record(Path(__file__).resolve().parents[2] / "results" / "baseline.json")
    assert {k: base.config[k] for k in DEFAULTS} == DEFAULTS
    assert {n: p["status"] for n, p in base.parts.items()} == {n: "ok" for n in job.part_names()}
    for name in (
        "ttft_ms",
        "decode_tokens_per_s",
        "peak_memory_mb",
        "host_gemv_speedup_x",
        "accuracy_drop_pct",
        "coldstart_cold_ms",
        "sustained_peak_ratio_10min",
        "lm_ppl_ratio",
        "lm_kld_mean",
        "lm_kld_p99",
        "lm_top1_agreement_pct",
    ):
        assert name in base.metrics
    # the decoder the LM metrics were measured on is named in the config and the descriptions
    assert base.config["accuracy_model"] == "smollm2-135m"
    assert "smollm2-135m" in base.metrics["lm_kld_mean"].description
    assert base.parts["accuracy"]["chunks"] == f"{job.ACCURACY_CHUNKS} of 12"


def test_host_and_simulated_host_profile_records_have_the_same_metric_names(
    tmp_path, microbench_profile
):
    """Issue 8 Done-when: `run --backend host --profile host.toml` and `run --backend simulated
    --profile host.toml` (a profile written by `calibrate --backend host`) record exactly the same
    metric names, with the same units and directions: the host computes the model's breakdown for
    the model it measured, the CPU frequency is provenance, and the model error is in both (the
    calibration's held-out number in the simulated record, the live one in the host record)."""
    from harmony_ref.device.runtime import load_profile

    host_profile = microbench_profile
    cal = load_profile(host_profile).calibration
    assert cal is not None and cal.n_held_out > 0 and cal.e2e_mape_pct is None  # --no-e2e: per-op
    scenario = [
        "--model",
        "qwen2.5-0.5b",
        "--prompt-tokens",
        "8",
        "--new-tokens",
        "4",
        "--context-tokens",
        "32",
        "--skip",
        ",".join(n for n in job.part_names() if n != "predicted"),
    ]
    records = {}
    for backend in ("host", "simulated"):
        out = tmp_path / backend
        assert (
            main(
                [
                    "run",
                    "--backend",
                    backend,
                    "--profile",
                    str(host_profile),
                    *scenario,
                    "--out-dir",
                    str(out),
                ]
            )
            == 0
        )
        (path,) = out.glob("run-*.json")
        records[backend] = load_record(path)
    # the calibrated host profile is the host run's model: physics-checked, model error recorded
    device_part = records["host"].parts["predicted"]["backend_provenance"]
    assert device_part["physics"].startswith("checked against host")
    assert device_part["model_profile"] == str(host_profile)
    assert "cpu_freq_mhz" in device_part or "not exposed" in device_part["cpu_freq"]
    assert (
        "host.toml" not in device_part["memory_budget"] and "host" in device_part["memory_budget"]
    )
    sim_part = records["simulated"].parts["predicted"]["backend_provenance"]
    assert sim_part["model_predicted"] == "qwen2.5-0.5b"
    assert sim_part["host_backend_measures"].split()[0] == device_part["host_model"]
    host, sim = records["host"].metrics, records["simulated"].metrics
    assert sorted(host.names()) == sorted(sim.names()), (
        f"only host: {sorted(set(host.names()) - set(sim.names()))}; "
        f"only simulated: {sorted(set(sim.names()) - set(host.names()))}"
    )
    for name in host.names():
        assert (host[name].unit, host[name].direction) == (sim[name].unit, sim[name].direction), (
            name
        )
    assert host["host_model_mape_pct"].kind == "measured" and host.value("host_model_mape_pct") >= 0
    assert sim["host_model_mape_pct"].kind == "exact"
    assert sim.value("host_model_mape_pct") == pytest.approx(cal.held_out_per_op_mape_pct)
    assert "held-out" in sim["host_model_mape_pct"].description
    # with a host profile, the host's launch overhead and roofline are the profile's
    assert "launch_overhead_us of host" in host["launch_overhead_pct"].description
    assert "roofline of host" in host["decode_memory_bound_pct"].description
