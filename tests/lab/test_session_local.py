"""Device sessions through the local transport (this machine as the device): it says which
telemetry files this machine lacks, takes the benchmark's exact peak memory from wait4, pushes by
SHA-256, kills a hung benchmark's whole group; and `--session` on run, calibrate and
check-runtime, each recording the session's block."""

import json
import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from harmony_ref.backends.command import CommandDevice
from harmony_ref.cli import main
from harmony_ref.lab.errors import BackendError
from harmony_ref.lab.session_spec import load_session
from harmony_ref.track.record import load_record
from tests.fake_device.fakephone import process_alive, toml_dumps

FAKE = Path(__file__).parents[1] / "fake_device"
NO_ZONE = 9999  # no machine has this thermal zone or this cpu: the unreadable case on any CI host
NO_CPU = 4095


def local_session(tmp_path, command, fmt="llama-bench", **sections):
    doc = {
        "device": {
            "transport": "local",
            "work_dir": str(tmp_path / "work"),
            "command_timeout_s": 30.0,
        },
        "benchmark": {
            "command": command,
            "format": fmt,
            "warmup_runs": 0,
            "repeats": 2,
            "timeout_s": 60.0,
        },
        "telemetry": {
            "thermal_zones": [NO_ZONE],
            "watch_zone": NO_ZONE,
            "cpus": [NO_CPU],
            "big_cpus": [NO_CPU],
            "battery_dir": "",
            "memory": "proc_status",
            "poll_interval_s": 0.05,
        },
    }
    for name, table in sections.items():
        doc[name] = {**doc.get(name, {}), **table} if isinstance(table, dict) else table
    path = tmp_path / "local.toml"
    path.write_text(toml_dumps(doc))
    return path


def fake(script, *args):
    return " ".join(["{python}", shlex.quote(str(FAKE / script)), *args])


def test_local_session_says_what_this_machine_lacks_and_reads_peak_memory(tmp_path):
    spec = load_session(local_session(tmp_path, fake("benchmark.py", "--format", "llama-bench")))
    m = CommandDevice(None, None, None, session=spec).run()
    block = m.session
    assert block["transport"] == "local" and block["valid_repeats"] == 2
    lacks = " ".join(block["notes"])
    assert f"/sys/class/thermal/thermal_zone{NO_ZONE}/temp" in lacks
    assert f"/sys/devices/system/cpu/cpu{NO_CPU}/cpufreq/scaling_cur_freq" in lacks
    assert "no cooldown and no temperature throttle check" in lacks
    assert "cooldown_s" not in m.metrics and "device_temp_peak_c" not in m.metrics
    peak = m.metrics["device_peak_memory_mb"]
    assert peak.value > 1.0 and "wait4 ru_maxrss" in peak.description  # a Python process
    assert len(m.metrics["decode_tokens_per_s"].samples) == 2 * 3  # 2 repeats x the tool's 3


def test_local_push_by_sha256(tmp_path):
    blob = tmp_path / "weights.bin"
    blob.write_bytes(os.urandom(4096))
    path = local_session(
        tmp_path,
        fake("benchmark.py", "--format", "llama-bench"),
        push=[{"local": "weights.bin", "remote": "w.bin"}],
        benchmark={"repeats": 1},
    )
    for expected in ("pushed", "skipped (same SHA-256 on the device)"):
        m = CommandDevice(None, None, None, session=load_session(path)).run()
        assert [p["action"] for p in m.session["pushes"]] == [expected]
    assert (tmp_path / "work" / "w.bin").read_bytes() == blob.read_bytes()


def test_local_hang_is_killed_with_its_children(tmp_path):
    pidfile = tmp_path / "child.pid"
    spec = load_session(
        local_session(
            tmp_path,
            fake("hang.py", shlex.quote(str(pidfile))),
            benchmark={"timeout_s": 1.0, "repeats": 1},
        )
    )
    with pytest.raises(BackendError, match="timed out after 1 s; its process group was killed"):
        CommandDevice(None, "mslite", None, session=spec).run()
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while process_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_alive(child)


def test_run_with_a_session_records_its_block_and_the_gate_takes_it(tmp_path, capsys):
    path = local_session(
        tmp_path,
        fake(
            "phone.py",
            "--model {model} --policy {policy}",
            "--prompt {prompt_tokens} --new {new_tokens}",
        ),
        benchmark={"repeats": 2},
    )
    runs = tmp_path / "runs"
    skip = "host,accuracy,coldstart,thermal"
    assert (
        main(
            [
                "run",
                "--backend",
                "command",
                "--session",
                str(path),
                "--skip",
                skip,
                "--model",
                "llama-3.2-1b",
                "--policy",
                "int4-g32",
                "--out-dir",
                str(runs),
            ]
        )
        == 0
    )
    (record,) = runs.glob("run-*.json")
    rec = load_record(record)
    block = rec.parts["predicted"]["session"]
    assert block["valid_repeats"] == 2 and len(block["telemetry"]) == 2
    assert rec.config["backend_options"]["session"] == str(path)
    assert len(rec.config["backend_options"]["session_id"]) == 16
    assert rec.metrics["decode_tokens_per_s"].samples  # the repeats' values
    assert "device_peak_memory_mb" in rec.metrics
    capsys.readouterr()
    assert main(["gate", "--baseline", str(record), "--current", str(record)]) == 0


def test_calibrate_with_a_session(tmp_path, capsys):
    from tests.calibrate.test_calibrate import PHONE_WORKLOADS

    path = local_session(
        tmp_path,
        fake(
            "phone.py",
            "--model {model} --policy {policy}",
            "--prompt {prompt_tokens} --new {new_tokens}",
        ),
        benchmark={"repeats": 1},
    )
    out = tmp_path / "phone.toml"
    assert (
        main(
            [
                "calibrate",
                "--backend",
                "command",
                "--session",
                str(path),
                "--workloads",
                PHONE_WORKLOADS,
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out)
    assert r["compute_efficiency"] == pytest.approx(0.31, rel=1e-3)  # phone.py's hidden value
    assert r["provenance"]["transport"] == "local"


def test_check_runtime_with_a_session(tmp_path, capsys):
    fix = Path(__file__).parents[1] / "fixtures" / "device_outputs" / "mslite_cosine.txt"
    path = local_session(tmp_path, "unused")
    bench = " ".join(
        [
            shlex.quote(sys.executable),
            shlex.quote(str(FAKE / "benchmark.py")),
            "--format mslite --file",
            fix.name,
            "--device-model FAKE-NPU",
        ]
    )
    code = main(
        [
            "check-runtime",
            "--format",
            "mslite",
            "--model",
            "m.ms",
            "--command",
            bench,
            "--session",
            str(path),
            "--out-dir",
            str(tmp_path / "runs"),
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    run = out["runs"][0]
    assert run["verdict"] == "accurate"
    assert run["session"]["valid_repeats"] == 1 and run["session"]["transport"] == "local"
    rec = load_record(run["record"])
    assert rec.parts["runtime_check"]["session"]["telemetry"][0]["samples"]["t_s"]
    assert rec.config["profile"].startswith("local:")


def test_measure_records_the_scenario_the_tool_ran(tmp_path, capsys):
    """llama-bench ran pp512 / tg128 (the fixture): the record says so whatever the command
    line's defaults (--prompt 64 --new 8 here), and the gate compares like with like."""
    path = local_session(
        tmp_path,
        fake("benchmark.py", "--format", "llama-bench"),
        benchmark={"repeats": 1, "model": "smollm2-135m", "policy": "int4-g32"},
    )
    runs = tmp_path / "runs"
    assert (
        main(
            [
                "measure",
                "--session",
                str(path),
                "--prompt",
                "64",
                "--new",
                "8",
                "--out-dir",
                str(runs),
                "--json",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "ran 512 prompt / 128 new tokens" in err and "not the 64 / 8 of --prompt / --new" in err
    (record,) = runs.glob("run-*.json")
    s = load_record(record).config["scenario"]
    assert (s["prompt_tokens"], s["new_tokens"]) == (512, 128)
    assert s["context_tokens"] >= 640
