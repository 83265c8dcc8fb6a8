"""Energy per token measured from the fake phone's battery (lab/energy.py): its
current_now / voltage_now carry a known power (the thermal model's operating point while a
benchmark decodes, IDLE_W otherwise) in a vendor's sign convention; the session recovers the
energy per token within 2% whichever sign the driver uses, and a charging phone gives no energy
metric and says why."""

import pytest

from harmony_ref.config import RunConfig
from harmony_ref.device.runtime import load_profile
from harmony_ref.device.thermal import decode_operating_points
from harmony_ref.lab.errors import BackendError
from harmony_ref.lab.session import DeviceSession
from tests.fake_device.phone_server import IDLE_W, PROFILE, WORKLOAD
from tests.lab.test_session import (  # noqa: F401
    adb_phone,
    fresh,
    hdc_phone,
    llama_bench,
    measured_record,
    phones,
)


def known_mj_per_token() -> float:
    """What the fake phone draws above idle per decoded token, cool (governor state 0)."""
    cfg = RunConfig.from_names(*WORKLOAD, prompt_tokens=128, new_tokens=128)
    pts = decode_operating_points(load_profile(PROFILE), cfg)
    return (float(pts.power_w[0]) - IDLE_W) / float(pts.tokens_per_s[0]) * 1e3


@pytest.mark.parametrize("vendor_sign", ["positive", "negative"])
def test_energy_per_token_equals_the_known_power(hdc_phone, tmp_path, capsys, vendor_sign):  # noqa: F811
    fresh(hdc_phone, tmp_path, current_sign=vendor_sign, benchmark={"repeats": 2})
    rec = measured_record(tmp_path / "phone.toml", tmp_path / "runs", capsys)
    block = rec["parts"]["session"]["session"]
    assert block["power"]["current_sign"].startswith(vendor_sign)  # told apart by the idle reads
    assert block["power"]["idle_power_w"] == pytest.approx(IDLE_W, rel=1e-3)
    got = rec["metrics"]["device_energy_per_token_mj"]
    assert got["value"] == pytest.approx(known_mj_per_token(), rel=0.02)
    assert len(got["samples"]) == 2
    assert rec["metrics"]["device_avg_power_w"]["value"] > IDLE_W


def test_a_charging_phone_gives_no_energy_metric_and_says_why(hdc_phone, tmp_path):  # noqa: F811
    spec = fresh(hdc_phone, tmp_path, charging=True, benchmark={"repeats": 1})
    work = spec.device.work_dir
    cmd = f"{work}/llama-bench -m {work}/model.gguf -p 64 -n 1024 -r 1 -o json"
    result = DeviceSession(spec).run(cmd, llama_bench)
    m = result.metrics()
    assert "device_energy_per_token_mj" not in m and "device_avg_power_w" not in m
    block = result.to_record()
    assert "'Charging'" in block["power"]["why"]
    assert any(n.startswith("no energy metric: battery status 'Charging'") for n in block["notes"])
    assert "decode_tokens_per_s" in m  # the rest of the measurement stands


def test_fidelity_records_scores_the_energy_model_on_a_measured_phone(hdc_phone, tmp_path, capsys):  # noqa: F811
    """`fidelity --records` takes a record's device_energy_per_token_mj and scores the model's
    decode energy above the idle power the session measured (calibrate/points.py
    decode_energy_mj): on the fake phone, whose power is the model's own decode operating point
    for its workload, the error is the measurement's alone (under 2%)."""
    import json

    from harmony_ref.cli import main

    fresh(
        hdc_phone,
        tmp_path,
        benchmark={"repeats": 2, "model": WORKLOAD[0], "policy": WORKLOAD[1]},
    )
    measured_record(tmp_path / "phone.toml", tmp_path / "runs", capsys)
    (path,) = (tmp_path / "runs").glob("run-*.json")
    capsys.readouterr()  # measure's own output
    assert main(["fidelity", "--sets", "records", "--records", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (point,) = [p for p in out["points"] if p["metric"] == "energy_per_token_mj"]
    rec = json.loads(path.read_text())
    assert point["measured"] == pytest.approx(rec["metrics"]["device_energy_per_token_mj"]["value"])
    cfg = RunConfig.from_dict(rec["config"])
    pts = decode_operating_points(load_profile(PROFILE), cfg)
    want = (float(pts.power_w[0]) - IDLE_W) / float(pts.tokens_per_s[0]) * 1e3
    assert point["predicted"] == pytest.approx(want, rel=1e-3)  # the idle power the phone read
    assert abs(point["error_pct"]) < 2.0
    (row,) = [r for r in out["summary"] if r["set"] == "records" and r["phase"] == "energy"]
    assert row["scored"] == 1 and row["mape_pct"] == pytest.approx(abs(point["error_pct"]))


STOP = "echo 1 > /sys/class/power_supply/Battery/input_suspend"  # Qualcomm's charger switch
RESTORE = "echo 0 > /sys/class/power_supply/Battery/input_suspend"


def test_power_commands_stop_charging_for_the_run_and_restore_it(hdc_phone, tmp_path):  # noqa: F811
    """[power] stop_charging / restore_charging: a phone on its charger measured as if on battery
    (the energy equals the known one within 2%), charging restored after the run, and restored
    also when the benchmark fails."""
    power = {"stop_charging": STOP, "restore_charging": RESTORE}
    spec = fresh(hdc_phone, tmp_path, charging=True, benchmark={"repeats": 2}, power=power)
    switch = hdc_phone.device_file("/sys/class/power_supply/Battery/input_suspend")
    work = spec.device.work_dir
    cmd = f"{work}/llama-bench -m {work}/model.gguf -p 128 -n 128 -r 1 -o json"
    result = DeviceSession(spec).run(cmd, llama_bench)
    m = result.metrics()
    assert m["device_energy_per_token_mj"].value == pytest.approx(known_mj_per_token(), rel=0.02)
    assert result.to_record()["power"]["charge_control"] == (
        "stopped before the idle reads, restored after the run"
    )
    assert switch.read_text().strip() == "0"  # charging again
    switch.unlink()
    bad = f"{work}/llama-bench -m {work}/no-such-model.gguf -p 128 -n 128 -r 1 -o json"
    with pytest.raises(BackendError, match="the benchmark exited with code 1"):
        DeviceSession(spec).run(bad, llama_bench)
    assert switch.read_text().strip() == "0"  # restored although the run failed


def test_power_commands_go_together(hdc_phone, tmp_path):  # noqa: F811
    with pytest.raises(ValueError, match="field 'power.restore_charging' = '': power.stop_"):
        fresh(hdc_phone, tmp_path, power={"stop_charging": STOP})


def test_odpm_rails_give_the_energy_per_token_also_on_a_charger(adb_phone, tmp_path, capsys):  # noqa: F811
    """[power] source = "odpm": the Android fake's Pixel power-rail counters (energy.py) give the
    known energy per token within 2%, on its charger too (the rails are not the battery)."""
    fresh(
        adb_phone,
        tmp_path,
        charging=True,
        benchmark={"repeats": 2},
        power={"source": "odpm", "idle_samples": 3},
        # reads while it runs are not needed for ODPM; a poll that ends with the run leaves no
        # idle time between the benchmark's exit and the counters' read (the fake charges each
        # command after a run its COMMAND_S)
        telemetry={"poll_interval_s": 0.5},
    )
    rec = measured_record(tmp_path / "phone.toml", tmp_path / "runs", capsys)
    block = rec["parts"]["session"]["session"]
    assert block["power"]["source"] == "odpm"
    assert block["power"]["idle_power_w"] == pytest.approx(IDLE_W, rel=1e-3)
    got = rec["metrics"]["device_energy_per_token_mj"]
    assert got["value"] == pytest.approx(known_mj_per_token(), rel=0.02)
    assert len(got["samples"]) == 2


def test_odpm_where_there_is_none_says_so(hdc_phone, tmp_path):  # noqa: F811
    spec = fresh(hdc_phone, tmp_path, benchmark={"repeats": 1}, power={"source": "odpm"})
    work = spec.device.work_dir
    cmd = f"{work}/llama-bench -m {work}/model.gguf -p 64 -n 256 -r 1 -o json"
    result = DeviceSession(spec).run(cmd, llama_bench)
    assert "device_energy_per_token_mj" not in result.metrics()
    assert result.to_record()["power"]["why"].startswith("no ODPM energy counters (/sys/bus/iio")
