"""Calibration fit: recovers known launch overhead, rates and bandwidth from synthetic op times
(with and without noise), keeps seeds for unknowns no op constrains, and reports held-out MAPE."""

import numpy as np
import pytest

from harmony_ref.calibrate.fit import OpSample, fit
from harmony_ref.metrics import mape_pct

TRUE = dict(
    launch_s=20e-6, rates={"int4": 40e9, "int8": 30e9, "fp16": 80e9, "vector": 5e9}, bw=20e9
)
SEED_RATES = {"int4": 10e9, "int8": 10e9, "fp16": 10e9, "vector": 1e9}
RECOVER_REL = 1e-6  # noise-free data: exact up to nnls round-off
NOISY_REL = 0.10  # 3% multiplicative noise: parameters within 10%


def true_time(cls, ops, nbytes, launches):
    return launches * TRUE["launch_s"] + max(ops / TRUE["rates"][cls], nbytes / TRUE["bw"])


def synthetic(noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for cls, bpw in (("int4", 0.5625), ("int8", 1.0), ("fp16", 4.0)):
        for i, (m, n, k) in enumerate(
            [
                (1, 512, 512),
                (1, 2048, 2048),
                (1, 4096, 4096),
                (16, 2048, 2048),
                (64, 2048, 2048),
                (1, 1024, 4096),
                (8, 4096, 1024),
            ]
        ):
            ops, nbytes = 2.0 * m * n * k, n * k * bpw + 4 * m * (n + k)
            t = true_time(cls, ops, nbytes, 1) * (1 + noise * rng.standard_normal())
            out.append(
                OpSample(f"{cls}_m{m}_n{n}_k{k}", cls, ops, nbytes, 1, t, holdout=i % 3 == 2)
            )
    for i, (rows, h) in enumerate([(1, 1024), (16, 2048), (64, 4096), (256, 4096), (4, 512)]):
        ops, nbytes = 12.0 * rows * h, 8.0 * rows * h + 8 * h
        for launches in (1, 3):
            t = true_time("vector", ops, nbytes * (1 if launches == 1 else 3), launches) * (
                1 + noise * rng.standard_normal()
            )
            out.append(
                OpSample(
                    f"norm_l{launches}_{rows}x{h}",
                    "vector",
                    ops,
                    nbytes * (1 if launches == 1 else 3),
                    launches,
                    t,
                    holdout=i == 4,
                )
            )
    out.append(OpSample("empty", "vector", 0.0, 0.0, 1, TRUE["launch_s"]))
    return out


def test_recovers_known_parameters_exactly():
    f = fit(synthetic(), seed_bandwidth=5e9, seed_rates=SEED_RATES)
    assert f.launch_s == pytest.approx(TRUE["launch_s"], rel=RECOVER_REL)
    assert f.bandwidth_bytes_per_s == pytest.approx(TRUE["bw"], rel=RECOVER_REL)
    for c, r in TRUE["rates"].items():
        assert f.rates[c] == pytest.approx(r, rel=RECOVER_REL), c
    assert set(f.fitted) == {"launch", "int4", "int8", "fp16", "vector", "bandwidth"}
    # the fp16 GEMV of 4096x4096 is memory-bound under the true numbers, the int4 GEMM compute-bound
    assert f.regimes["fp16_m1_n4096_k4096"] == "memory"
    assert f.regimes["int4_m64_n2048_k2048"] == "compute"


def test_noisy_fit_and_heldout_mape():
    ops = synthetic(noise=0.03, seed=1)
    f = fit(ops, seed_bandwidth=5e9, seed_rates=SEED_RATES)
    assert f.launch_s == pytest.approx(TRUE["launch_s"], rel=NOISY_REL)
    assert f.rates["int4"] == pytest.approx(TRUE["rates"]["int4"], rel=NOISY_REL)
    held = [(f.predict_s(op), op.time_s) for op in ops if op.holdout]
    assert len(held) >= 5
    assert mape_pct(held) < 8.0


def test_unconstrained_unknown_keeps_its_seed():
    ops = [op for op in synthetic() if op.rate_class != "int8"]
    f = fit(ops, seed_bandwidth=5e9, seed_rates=SEED_RATES)
    assert "int8" not in f.fitted
    assert f.rates["int8"] == SEED_RATES["int8"]


def test_fit_needs_enough_ops():
    with pytest.raises(ValueError, match="at least 3"):
        fit(synthetic()[:2], 5e9, SEED_RATES)


def test_bad_sample():
    with pytest.raises(ValueError, match="time_s"):
        OpSample("x", "int4", 1.0, 1.0, 1, 0.0)
    with pytest.raises(ValueError, match="rate_class"):
        OpSample("x", "fp8", 1.0, 1.0, 1, 1.0)


# --- profile written from a fit, and the CLI -----------------------------------------------------

import csv  # noqa: E402
import json  # noqa: E402

import harmony_ref.device.runtime as DEVICE  # noqa: E402
from harmony_ref.calibrate.fit import HostFit, load_op_times  # noqa: E402
from harmony_ref.calibrate.write import host_profile_toml  # noqa: E402
from harmony_ref.cli import main  # noqa: E402


def test_profile_reproduces_the_fit(tmp_path):
    f = HostFit(
        20e-6,
        dict(TRUE["rates"]),
        TRUE["bw"],
        ("launch", "int4", "int8", "fp16", "vector", "bandwidth"),
        1,
    )
    nominal = {"int4": 400e9, "int8": 400e9, "fp16": 100e9, "vector": 100e9}
    path = tmp_path / "h.toml"
    path.write_text(host_profile_toml(f, 25.0, nominal, 1 << 20, 8e9, "test"))
    p = DEVICE.load_profile(str(path))
    c = p.compute
    for dtype in ("int4", "int8", "fp16"):
        assert c.matmul_ops_per_s(dtype) * c.compute_efficiency == pytest.approx(
            TRUE["rates"][dtype], rel=1e-12
        )
    assert c.vector_fp16_gflops * 1e9 * c.compute_efficiency == pytest.approx(
        TRUE["rates"]["vector"], rel=1e-12
    )
    assert c.compute_efficiency == pytest.approx(40e9 / 400e9)
    m = p.memory
    assert m.dram_bandwidth_gbps * 1e9 * m.memory_efficiency == pytest.approx(TRUE["bw"], rel=1e-12)
    assert m.dram_bandwidth_gbps == 25.0 and m.memory_efficiency == pytest.approx(
        0.8
    )  # 20 of 25 GB/s
    assert p.runtime.launch_overhead_us == pytest.approx(20.0)


def write_ops_csv(path, ops):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["name", "rate_class", "ops", "bytes", "launches", "time_us", "holdout"])
        for op in ops:
            w.writerow(
                [
                    op.name,
                    op.rate_class,
                    op.ops,
                    op.nbytes,
                    op.launches,
                    op.time_s * 1e6,
                    int(op.holdout),
                ]
            )


def test_cli_command_backend_from_op_times(tmp_path, capsys):
    src = tmp_path / "ops.csv"
    write_ops_csv(src, synthetic(noise=0.02, seed=3))
    assert len(load_op_times(src)) == len(synthetic())
    out = tmp_path / "phone.toml"
    assert (
        main(
            [
                "calibrate",
                "--backend",
                "command",
                "--ops",
                str(src),
                "--out",
                str(out),
                "--name",
                "phone",
                "--json",
            ]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out)
    assert r["launch_overhead_us"] == pytest.approx(20.0, rel=NOISY_REL)
    assert r["rates_gops"]["int4"] == pytest.approx(40.0, rel=NOISY_REL)
    assert r["per_op_mape_pct"] < 8.0
    assert r["e2e_mape_pct"] is None
    p = DEVICE.load_profile(str(out))
    assert p.name == "phone"
    from harmony_ref.backends.simulated import SimulatedDevice
    from harmony_ref.config import RunConfig

    assert (
        SimulatedDevice(p)
        .predict(RunConfig.from_names(model="llama-3.2-1b"))
        .value("decode_tokens_per_s")
        > 0
    )
    # the text report prints plain numbers (numpy 2 scalars inside a dict print as np.float64(...))
    assert main(["calibrate", "--backend", "command", "--ops", str(src), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "rates_gops: {'int4': " in text and "np.float64" not in text


def test_cli_command_backend_bad_file(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("name,ops\nx,1\n")
    assert (
        main(
            [
                "calibrate",
                "--backend",
                "command",
                "--ops",
                str(bad),
                "--out",
                str(tmp_path / "x.toml"),
            ]
        )
        == 2
    )
    assert "missing column(s)" in capsys.readouterr().err
    assert not (tmp_path / "x.toml").exists()


def test_cli_host_quick(tmp_path, capsys):
    out = tmp_path / "host.toml"
    assert (
        main(
            [
                "calibrate",
                "--backend",
                "host",
                "--method",
                "microbench",
                "--quick",
                "--repeats",
                "2",
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out)
    assert DEVICE.load_profile(str(out)).runtime.launch_overhead_us == pytest.approx(
        r["launch_overhead_us"]
    )
    assert r["ops_held_out"] > 0 and r["ops_fitted"] > r["ops_held_out"]
    held = [o for o in r["ops"] if o["set"] == "held-out"]
    assert r["per_op_mape_pct"] == pytest.approx(sum(o["ape_pct"] for o in held) / len(held))
    e2e = [row for row in r["e2e"] if row["metric"] == "e2e_ms" and not row["fused"]]
    assert e2e and r["e2e_mape_pct"] == pytest.approx(sum(x["ape_pct"] for x in e2e) / len(e2e))
    assert r["host_model_mape_pct"] == r["e2e_mape_pct"]
    # the written profile carries its held-out error ([calibration]); a SimulatedDevice reports it
    cal = DEVICE.load_profile(str(out)).calibration
    assert cal.e2e_mape_pct == pytest.approx(r["e2e_mape_pct"])
    assert cal.held_out_per_op_mape_pct == pytest.approx(r["per_op_mape_pct"])
    assert (cal.n_fit, cal.n_held_out) == (
        r["ops_fitted"],
        r["ops_held_out"],
    ) and cal.n_held_out_e2e == len(e2e)
    from harmony_ref.backends.simulated import SimulatedDevice
    from harmony_ref.config import RunConfig

    sim = SimulatedDevice(str(out)).predict(
        RunConfig.from_names(model="qwen2.5-0.5b", policy="int4-g128")
    )
    assert sim.value("host_model_mape_pct") == pytest.approx(r["e2e_mape_pct"])
    # held-out workloads are not among the fitted ones
    fitted_names = {o["op"].split(":")[0] for o in r["ops"] if o["set"] == "fit"}
    assert not fitted_names & {row["workload"] for row in r["e2e"]}


PHONE_WORKLOADS = (
    "llama-3.2-1b:int4-g32:512:128;qwen2.5-0.5b:int8:256:64;llama-3.2-3b:int4-g128:1024:32;"
    "qwen2.5-1.5b:mixed:128:128"
)


def phone_command(*extra):
    import shlex
    import sys
    from pathlib import Path

    script = Path(__file__).parents[1] / "fake_device" / "phone.py"
    return " ".join(
        [
            shlex.quote(sys.executable),
            shlex.quote(str(script)),
            "--model {model} --policy {policy}",
            "--prompt {prompt_tokens} --new {new_tokens}",
            *extra,
        ]
    )


def test_cli_command_backend_recovers_hidden_efficiencies(tmp_path, capsys):
    """A fake phone times phases with hidden efficiencies and launch overhead; the phase-level
    fit through llama-bench output recovers them, and predicts the held-out workload."""
    out = tmp_path / "phone.toml"
    assert (
        main(
            [
                "calibrate",
                "--backend",
                "command",
                "--command",
                phone_command(),
                "--format",
                "llama-bench",
                "--workloads",
                PHONE_WORKLOADS,
                "--profile",
                "harmony-flagship",
                "--out",
                str(out),
                "--name",
                "phone",
                "--json",
            ]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out)
    assert r["compute_efficiency"] == pytest.approx(0.31, rel=1e-3)
    assert r["memory_efficiency"] == pytest.approx(0.62, rel=1e-3)
    assert r["launch_overhead_us"] == pytest.approx(45.0, rel=1e-3)
    assert r["held_out_phase_mape_pct"] < 0.1  # decode: mid-step vs the simulator's mean over steps
    held = [p for p in r["phases"] if p["set"] == "held-out"]
    assert sorted(p["phase"] for p in held) == ["decode", "e2e", "prefill"]
    e2e_row = next(p for p in held if p["phase"] == "e2e")
    assert r["held_out_e2e_mape_pct"] == pytest.approx(e2e_row["ape_pct"])
    assert r["held_out_e2e_mape_pct"] < 0.1
    assert r["provenance"]["device_model"] == "FAKE-PHONE"
    p = DEVICE.load_profile(str(out))
    assert p.compute.compute_efficiency == pytest.approx(0.31, rel=1e-3)
    assert (
        p.compute.cube_int4_tops == DEVICE.load_profile("harmony-flagship").compute.cube_int4_tops
    )


def test_cli_command_backend_faster_than_peak_is_implausible(tmp_path, capsys):
    out = tmp_path / "phone.toml"
    assert (
        main(
            [
                "calibrate",
                "--backend",
                "command",
                "--command",
                phone_command("--compute-eff", "2.5"),
                "--format",
                "llama-bench",
                "--workloads",
                PHONE_WORKLOADS,
                "--profile",
                "harmony-flagship",
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out)
    assert any("implausible: fitted compute_efficiency" in n for n in r["notes"])
    assert DEVICE.load_profile(str(out)).compute.compute_efficiency == 1.0


def test_cli_command_backend_needs_four_workloads(tmp_path, capsys):
    assert (
        main(
            [
                "calibrate",
                "--backend",
                "command",
                "--command",
                phone_command(),
                "--format",
                "llama-bench",
                "--workloads",
                "llama-3.2-1b:int8:64:16",
                "--out",
                str(tmp_path / "x.toml"),
            ]
        )
        == 2
    )
    assert "at least 4" in capsys.readouterr().err


def test_a_phase_calibration_fits_the_shared_numbers_of_a_runtime_with_soc_entries(
    tmp_path, capsys
):
    """llama.cpp-cpu ships a matmul efficiency of the Dimensity 9300's own; a team's phone on
    that SoC measured through the command backend refits the runtime for that phone: the fit
    moves the shared numbers (no entry left to hide the SoC from them) and finds the phone's."""
    from harmony_ref.device.runtime import load_runtime

    assert load_runtime("llama.cpp-cpu").soc_entry("dimensity-9300") is not None
    out = tmp_path / "rt.toml"
    args = [
        "calibrate",
        "--backend",
        "command",
        "--command",
        phone_command("--base dimensity-9300 --compute-eff 0.2 --memory-eff 0.5 --tg-from-empty"),
        "--format",
        "llama-bench",
        "--workloads",
        PHONE_WORKLOADS,
        "--runtime",
        "llama.cpp-cpu",
        "--profile",
        "dimensity-9300",
        "--out",
        str(out),
        "--json",
    ]
    assert main(args) == 0
    capsys.readouterr()
    rt = load_runtime(out)
    assert rt.soc_efficiency == ()
    assert rt.efficiency.matmul == pytest.approx(0.2, rel=1e-2)
    assert rt.efficiency.memory == pytest.approx(0.5, rel=1e-2)


def test_a_fitted_profile_that_does_not_load_never_replaces_the_previous_file(tmp_path):
    # issue 45 item 1: calibrate --out reads its profile back from a temporary first
    from types import SimpleNamespace

    from harmony_ref.calibrate.run import _write_profile

    out = tmp_path / "h.toml"
    out.write_bytes(b"# the user's previous profile\n")
    result = SimpleNamespace(profile_toml='name = "x"\nbogus_field = 1\n')
    with pytest.raises(ValueError):
        _write_profile(result, out)
    assert [p.name for p in tmp_path.iterdir()] == ["h.toml"]
    assert out.read_bytes() == b"# the user's previous profile\n"
