"""Device sessions against the fake phone (tests/fake_device: fake `hdc` and `adb` executables over
a state folder, the phone's temperature from harmony-ref's own thermal model in accelerated
simulated time): SHA-256 push skip and redo, a truncated push refused with the old file kept,
cooldown to the threshold and its one-line failure, throttled repeats marked and left out, a
device vanishing mid-run (exit 2, nothing recorded), a hung benchmark killed at its timeout, and
the session file's validation. Nothing here waits for a phone to cool in real time."""

import dataclasses
import json
import os
import time

import pytest

from harmony_ref.backends.command import CommandDevice
from harmony_ref.cli import main
from harmony_ref.lab.errors import BackendError
from harmony_ref.lab.parsers import parse
from harmony_ref.lab.session import CooldownTimeout, DeviceSession
from harmony_ref.lab.session_spec import load_session
from tests.fake_device.fakephone import FakePhone, process_alive, toml_dumps


@pytest.fixture(scope="module")
def phones(tmp_path_factory):
    """One fake HarmonyOS and one fake Android phone for the module, their servers started side
    by side (each imports Numba for the thermal model)."""
    import subprocess

    made = {
        kind: FakePhone.create(tmp_path_factory.mktemp(kind) / "phone", kind)
        for kind in ("hdc", "adb")
    }
    starting = [
        subprocess.Popen(
            [
                str(p.executable),
                "list" if k == "hdc" else "devices",
                "targets" if k == "hdc" else "-l",
            ],
            stdout=subprocess.DEVNULL,
        )
        for k, p in made.items()
    ]
    for proc in starting:
        proc.wait(timeout=120)
    yield made
    for phone in made.values():
        phone.stop()


@pytest.fixture
def hdc_phone(phones):
    return phones["hdc"]


@pytest.fixture
def adb_phone(phones):
    return phones["adb"]


def fresh(
    phone,
    tmp_path,
    die_c=30.0,
    skin_c=30.0,
    faults=None,
    load_s=0.0,
    loaded_freq_fraction=1.0,
    charging=False,
    current_sign="positive",
    **sections,
):
    """The phone back at the given temperatures, faults, start window, running frequency and
    battery (charging, current_now's sign while discharging), and a session file for it in its own work directory (so tests do not share device files)."""
    phone.reconfigure(
        die_c=die_c,
        skin_c=skin_c,
        faults=faults or {},
        load_s=load_s,
        loaded_freq_fraction=loaded_freq_fraction,
        charging=charging,
        current_sign=current_sign,
    )
    device = {"work_dir": f"/data/local/tmp/{tmp_path.name}"}
    device.update(sections.pop("device", {}))
    return load_session(phone.session_file(tmp_path / "phone.toml", device=device, **sections))


def measured_record(path, runs, capsys, *extra) -> dict:
    """`measure --session path` must succeed; its one run record, read."""
    rc = main(["measure", "--session", str(path), "--out-dir", str(runs), *extra])
    assert rc == 0, capsys.readouterr().err
    (record,) = runs.glob("run-*.json")
    return json.loads(record.read_text())


def llama_bench(text):
    return parse("llama-bench", text).metrics


def test_push_is_skipped_when_the_sha256_matches_and_redone_when_not(hdc_phone, tmp_path):
    spec = fresh(hdc_phone, tmp_path, cooldown={"enabled": False})
    s = DeviceSession(spec)
    s.prepare()
    assert [p["action"] for p in s.pushes] == ["pushed", "pushed"]
    model = spec.local_path(spec.push[1])
    remote = hdc_phone.device_file(s.remote("model.gguf"))
    assert remote.read_bytes() == model.read_bytes()
    pushes = hdc_phone.state()["pushes"]
    again = DeviceSession(spec)
    again.prepare()
    assert [p["action"] for p in again.pushes] == ["skipped (same SHA-256 on the device)"] * 2
    assert hdc_phone.state()["pushes"] == pushes  # nothing was sent
    model.write_bytes(os.urandom(3000))
    third = DeviceSession(spec)
    third.prepare()
    assert third.pushes[0]["action"].startswith("skipped")
    assert third.pushes[1]["action"] == "pushed (replaced a different file)"
    assert remote.read_bytes() == model.read_bytes()


def test_a_truncated_push_is_refused_and_the_old_file_kept(hdc_phone, tmp_path):
    spec = fresh(hdc_phone, tmp_path, cooldown={"enabled": False})
    DeviceSession(spec).prepare()
    remote = hdc_phone.device_file(f"/data/local/tmp/{tmp_path.name}/model.gguf")
    old = remote.read_bytes()
    spec.local_path(spec.push[1]).write_bytes(os.urandom(5000))
    hdc_phone.reconfigure(faults={"truncate_pushes": 1})
    with pytest.raises(
        BackendError,
        match=r"truncated or corrupted\); refused: the device "
        r"keeps its previous file",
    ):
        DeviceSession(spec).prepare()
    assert remote.read_bytes() == old
    assert [p.name for p in remote.parent.iterdir() if ".tmp-" in p.name] == []


def test_cooldown_waits_for_the_threshold_in_simulated_time(hdc_phone, tmp_path):
    spec = fresh(
        hdc_phone,
        tmp_path,
        die_c=70.0,
        skin_c=46.0,
        benchmark={"repeats": 1},
        cooldown={"threshold_c": 38.0, "check_interval_s": 60.0},
    )
    uptime0 = hdc_phone.state()["uptime_s"]
    result = DeviceSession(spec).run(
        spec.benchmark.command.format(work_dir=spec.device.work_dir), llama_bench
    )
    first = result.to_record()["telemetry"][0]
    assert first["cooldown_s"] >= 60.0  # the phone started at 70 C: it had to wait
    assert first["temp_before_c"] <= 38.0
    samples = first["samples"]
    assert samples["phase"][0] == "before" and samples["phase"][-1] == "after"
    assert hdc_phone.state()["uptime_s"] - uptime0 >= first["cooldown_s"]  # the phone's clock
    m = result.metrics()
    assert m.value("cooldown_s") == pytest.approx(first["cooldown_s"])
    assert m.value("device_temp_start_c") == first["temp_before_c"]


def test_cooldown_fails_in_one_line_when_the_zone_never_cools(hdc_phone, tmp_path):
    spec = fresh(
        hdc_phone,
        tmp_path,
        die_c=58.0,
        skin_c=44.0,
        faults={"stuck_zone": True},
        cooldown={"threshold_c": 38.0, "max_wait_s": 300.0, "check_interval_s": 100.0},
    )
    with pytest.raises(CooldownTimeout) as e:
        DeviceSession(spec).run("true", llama_bench)
    msg = str(e.value)
    assert "\n" not in msg
    assert "thermal zone 0" in msg and "58.0 C" in msg and "38 C threshold" in msg
    assert "never cooled" in msg
    path = tmp_path / "phone.toml"
    rc = main(["measure", "--session", str(path), "--out-dir", str(tmp_path / "runs")])
    assert rc == 1
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").rglob("*.json"))


def test_throttled_repeats_are_marked_and_left_out_of_the_metric(hdc_phone, tmp_path):
    spec = fresh(
        hdc_phone,
        tmp_path,
        benchmark={"repeats": 5, "min_valid_repeats": 1},
        cooldown={"enabled": False},
    )
    work = spec.device.work_dir
    cmd = f"{work}/llama-bench -m {work}/model.gguf -p 64 -n 1024 -r 1 -o json"
    result = DeviceSession(spec).run(cmd, llama_bench)
    rows = result.to_record()["telemetry"]
    flags = [r["throttled"] for r in rows]
    assert flags[0] is False and flags[-1] is True  # back to back, the phone heats up
    throttled = [r for r in rows if r["throttled"]]
    assert all(r["reasons"] for r in throttled)
    valid = [r for r in rows if not r["throttled"]]
    m = result.metrics()
    got = m["decode_tokens_per_s"]
    assert sorted(got.samples) == sorted(r["metrics"]["decode_tokens_per_s"] for r in valid)
    slow = min(r["metrics"]["decode_tokens_per_s"] for r in throttled)
    assert slow < min(got.samples)  # the throttled repeats were slower, and are not in it
    assert m.value("throttled_repeats") == len(throttled)
    assert m.value("device_temp_peak_c") >= spec.throttle.temp_c
    assert result.to_record()["valid_repeats"] == len(valid)
    asked = dataclasses.replace(
        spec, throttle=dataclasses.replace(spec.throttle, keep_throttled=True)
    )
    kept = dataclasses.replace(result, spec=asked).metrics()["decode_tokens_per_s"]
    assert len(kept.samples) == len(rows)  # unless the user asks: then every repeat counts


def test_too_few_valid_repeats_are_recorded_and_refused_by_the_gate(hdc_phone, tmp_path):
    spec = fresh(
        hdc_phone,
        tmp_path,
        die_c=66.0,
        skin_c=44.0,
        benchmark={"repeats": 2, "min_valid_repeats": 2},
        cooldown={"enabled": False},
    )
    runs = tmp_path / "runs"
    rc = main(
        [
            "measure",
            "--session",
            spec.path,
            "--out-dir",
            str(runs),
            "--model",
            "llama-3.2-1b",
            "--policy",
            "int4-g32",
            "--json",
        ]
    )
    assert rc == 1
    (record,) = runs.glob("run-*.json")
    block = json.loads(record.read_text())["parts"]["session"]["session"]
    assert block["valid_repeats"] < block["min_valid_repeats"] == 2
    assert all(r["samples"]["t_s"] for r in block["telemetry"])  # the telemetry is kept
    rc = main(["gate", "--baseline", str(record), "--current", str(record)])
    assert rc == 2


def test_a_device_that_vanishes_mid_run_is_exit_2_naming_it_with_nothing_recorded(
    hdc_phone, tmp_path, capsys
):
    fresh(
        hdc_phone,
        tmp_path,
        faults={"vanish_on_run": 2},
        benchmark={"repeats": 3},
        cooldown={"enabled": False},
    )
    runs = tmp_path / "runs"
    rc = main(["measure", "--session", str(tmp_path / "phone.toml"), "--out-dir", str(runs)])
    err = capsys.readouterr().err
    assert rc == 2
    assert hdc_phone.serial in err and "no result recorded" in err
    assert not runs.exists() or not list(runs.rglob("*.json"))


def test_a_hung_benchmark_is_killed_at_its_timeout(hdc_phone, tmp_path):
    spec = fresh(
        hdc_phone,
        tmp_path,
        faults={"hang_on_run": 1},
        benchmark={"repeats": 1, "timeout_s": 1.5},
        cooldown={"enabled": False},
    )
    pidfile = hdc_phone.root / "hang_child.pid"
    pidfile.unlink(missing_ok=True)
    dev = CommandDevice(None, None, None, session=spec)
    with pytest.raises(
        BackendError,
        match=r"timed out after 1.5 s; its process group was "
        r"killed",
    ):
        dev.run()
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while process_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_alive(child), "the hung benchmark's child outlived the timeout"


def test_adb_session_identity_and_memory(adb_phone, tmp_path, capsys):
    fresh(adb_phone, tmp_path, benchmark={"repeats": 2}, cooldown={"threshold_c": 40.0})
    runs = tmp_path / "runs"
    rc = main(
        [
            "measure",
            "--session",
            str(tmp_path / "phone.toml"),
            "--out-dir",
            str(runs),
            "--model",
            "llama-3.2-1b",
            "--policy",
            "int4-g32",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    block = out["session"]
    assert block["identity"]["device_model"] == "Pixel 8"
    assert block["identity"]["soc"] == "Tensor G3"
    assert block["valid_repeats"] == 2
    assert out["metrics"]["device_peak_memory_mb"]["value"] > 0
    assert "VmHWM" in out["metrics"]["device_peak_memory_mb"]["description"]
    assert out["metrics"]["decode_tokens_per_s"]["kind"] == "measured"
    assert len(out["metrics"]["decode_tokens_per_s"]["samples"]) == 2
    (record,) = runs.glob("run-*.json")
    assert json.loads(record.read_text())["config"]["backend_options"]["transport"] == "adb"


def test_mslite_on_hdc_memory_from_hidumper_and_the_devices_command(hdc_phone, tmp_path, capsys):
    bench = tmp_path / "benchmark"
    bench.write_text("#!fake MindSpore Lite benchmark\n")
    model = tmp_path / "model.ms"
    model.write_bytes(os.urandom(32 * 1024))
    spec = fresh(
        hdc_phone,
        tmp_path,
        cooldown={"enabled": False},
        benchmark={
            "repeats": 1,
            "format": "mslite",
            "command": "{work_dir}/benchmark --modelFile={work_dir}/model.ms "
            "--loopCount=20 --numThreads=4",
        },
        push=[
            {"local": str(bench), "remote": "benchmark", "executable": True},
            {"local": str(model), "remote": "model.ms"},
        ],
    )
    result = CommandDevice(None, None, None, session=spec).run()
    assert result.metrics.value("e2e_ms") > 0  # MindSpore Lite's AvgRunTime line
    assert result.provenance["model_file"] == "model.ms"
    assert "hidumper" in result.metrics["device_peak_memory_mb"].description
    model_mb = spec.local_path(spec.push[1]).stat().st_size / 1e6
    assert result.metrics.value("device_peak_memory_mb") > model_mb
    assert result.session["identity"]["device_model"] == "ALN-AL00"
    rc = main(["devices", "--transport", "hdc", "--hdc", str(hdc_phone.executable), "--json"])
    listed = json.loads(capsys.readouterr().out)["devices"]
    assert rc == 0
    assert [(d["serial"], d["device_model"], d["soc"]) for d in listed] == [
        (hdc_phone.serial, "ALN-AL00", "kirin9000s")
    ]


@pytest.mark.parametrize(
    "change, field",
    [
        ({"device": {"transport": "usb"}}, "device.transport"),
        ({"device": {"serial": ""}}, "device.serial"),
        ({"device": {"work_dir": "tmp/x"}}, "device.work_dir"),
        ({"benchmark": {"repeats": 0}}, "benchmark.repeats"),
        ({"benchmark": {"repeats": 2, "min_valid_repeats": 3}}, "benchmark.min_valid_repeats"),
        ({"benchmark": {"format": "onnx"}}, "benchmark.format"),
        ({"telemetry": {"watch_zone": 5}}, "telemetry.watch_zone"),
        ({"telemetry": {"big_cpus": [9]}}, "telemetry.big_cpus"),
        ({"telemetry": {"memory": "hidumper"}, "device": {"transport": "adb"}}, "telemetry.memory"),
        ({"cooldown": {"threshold_c": 500.0}}, "cooldown.threshold_c"),
        ({"throttle": {"min_big_freq_fraction": 1.5}}, "throttle.min_big_freq_fraction"),
        ({"push": [{"local": "missing.bin", "remote": "m"}]}, "push[0].local"),
        ({"push": [{"local": "phone.toml", "remote": "../escape"}]}, "push[0].remote"),
        ({"device": {"profile": "no-such-phone"}}, "device.profile"),
        ({"cooldown": {"wait": 3}}, "cooldown.wait"),
        ({"telemetry": {"thermal_status": "dumpsys"}}, "telemetry.thermal_status"),
        ({"throttle": {"sustain_s": -1.0}}, "throttle.sustain_s"),
        ({"power": {"current_sign": "up"}}, "power.current_sign"),
    ],
)
def test_a_bad_session_file_names_file_field_and_value(hdc_phone, tmp_path, capsys, change, field):
    doc = hdc_phone.session_doc(tmp_path / "files")
    for name, table in change.items():
        doc[name] = table if isinstance(table, list) else {**doc.get(name, {}), **table}
    path = tmp_path / "phone.toml"
    path.write_text(toml_dumps(doc))
    with pytest.raises(ValueError) as e:
        load_session(path)
    assert path.name in str(e.value) and field in str(e.value)
    runs = tmp_path / "runs"
    assert main(["measure", "--session", str(path), "--out-dir", str(runs)]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert len(err.strip()) < 200, err
    assert not runs.exists()
