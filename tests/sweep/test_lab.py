"""The device lab (sweep/lab.py): a grid measured on four fake phones at once (tests/fake_device,
two over hdc and two over adb, each a Dask worker resource of a local lab), one of which
vanishes mid-sweep: every point of the three that stay finishes, the fourth's points after it
left are failed rows naming its serial, a rerun computes nothing and `--retry-failed` measures
the failed points once the phone is back. Configs go to the phones of their profile; a phone no
worker declares fails its points at once; bad lab input is one line, exit 2, nothing written."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from harmony_ref.cli import main
from harmony_ref.sweep.grid import Grid
from harmony_ref.sweep.lab import Lab, load_phones
from harmony_ref.sweep.run import run_sweep
from harmony_ref.sweep.store import SweepStore
from tests.fake_device.fakephone import FakePhone

COMMAND = (
    "{work_dir}/llama-bench -m {work_dir}/model.gguf -p {prompt_tokens} -n {new_tokens} "
    "-r 1 -o json"
)
KINDS = ("hdc", "hdc", "adb", "adb")
SERIALS = ("LAB0HDC000001", "LAB0HDC000002", "LAB0ADB000003", "LAB0ADB000004")
GRID = ["--models", "llama-3.2-1b", "--policies", "int4-g128,int8", "--prompt", "64,128"]


def session(phone: FakePhone, folder: Path, profile="harmony-flagship", **sections) -> Path:
    """A lab session file for `phone`: one measured repeat a point, the grid's tokens."""
    device = {"profile": profile, **sections.pop("device", {})}
    bench = {"command": COMMAND, "repeats": 1, "warmup_runs": 0, **sections.pop("benchmark", {})}
    return phone.session_file(
        folder / f"{phone.serial}.toml", device=device, benchmark=bench, **sections
    )


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """Four fake phones, their servers started side by side, and a session file each."""
    root = tmp_path_factory.mktemp("lab")
    phones = [
        FakePhone.create(root / s, kind, serial=s) for kind, s in zip(KINDS, SERIALS, strict=True)
    ]
    starting = [
        subprocess.Popen(
            [str(p.executable), *(("list", "targets") if p.kind == "hdc" else ("devices", "-l"))],
            stdout=subprocess.DEVNULL,
        )
        for p in phones
    ]
    for proc in starting:
        proc.wait(timeout=180)
    sessions = [session(p, root / "phones") for p in phones]
    yield phones, sessions
    for p in phones:
        p.stop()


def one_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    assert len(lines[0]) < 200, lines[0]
    return lines[0]


def test_four_phones_at_once_one_vanishes_and_the_others_finish(lab, tmp_path, capsys):
    phones, sessions = lab
    gone = phones[3]
    for p in phones:
        p.reconfigure(faults={})
    gone.reconfigure(faults={"vanish_on_run": 2})  # its second point: the phone leaves
    argv = ["sweep", "--name", "lab", "--sessions", *map(str, sessions), *GRID]
    argv += ["--out-dir", str(tmp_path)]
    assert main(argv) == 1  # failed points
    out = capsys.readouterr().out
    assert "sweep lab: 16 points: 13 computed, 0 reused, 3 failed" in out
    assert "a local lab (4 phones)" in out
    for serial in SERIALS[:3]:
        assert f"phone {serial}: 4 points: 4 computed, 0 reused, 0 failed" in out
    assert f"phone {gone.serial}: 4 points: 1 computed, 0 reused, 3 failed (first: " in out

    df = pd.read_parquet(tmp_path / "lab" / "points.parquet")
    assert len(df) == 16 and df["key"].is_unique
    assert (df["backend"] == "command").all() and set(df["serial"]) == set(SERIALS)
    stay = df[df["serial"] != gone.serial]
    assert set(stay["status"]) == {"ok"} and stay["decode_tokens_per_s"].gt(0).all()
    left = df[df["serial"] == gone.serial]
    assert sorted(left["status"]) == ["failed", "failed", "failed", "ok"]
    for error in left.loc[left["status"] == "failed", "error"]:
        assert gone.serial in error and "\n" not in error and len(error) < 200, error
    assert any("disappeared" in e for e in left["error"])  # the run it vanished in
    # each phone ran its own points: the phone's own log holds one benchmark per point
    for p in phones[:3]:
        assert p.state()["runs"] == 4
    # the phones were measured at once: each began a point before any had done all of its own
    start = pd.to_datetime(stay["utc_time"])
    end = start + pd.to_timedelta(stay["seconds"], unit="s")
    by_phone = stay.assign(start=start, end=end).groupby("serial")
    assert by_phone["start"].min().max() < by_phone["end"].max().min()
    rec = json.loads((tmp_path / "lab" / stay["record"].iloc[0]).read_text())
    block = rec["parts"]["predicted"]["session"]
    assert block["serial"] in SERIALS and rec["config"]["backend_options"]["session_id"]

    # resumable: a rerun computes nothing; with --retry-failed and the phone back, its three
    gone.reconfigure(faults={})
    assert main(argv) == 0
    assert "16 points: 0 computed, 16 reused, 0 failed" in capsys.readouterr().out
    assert main([*argv, "--retry-failed", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["computed"], summary["reused"], summary["failed"]) == (3, 13, 0)
    assert summary["phones"][gone.serial]["ok"] == 3
    df = pd.read_parquet(tmp_path / "lab" / "points.parquet")
    assert len(df) == 16 and set(df["status"]) == {"ok"}


def test_configs_go_to_the_phones_of_their_profile(tmp_path):
    made = [FakePhone.create(tmp_path / s, "hdc", serial=s) for s in SERIALS[:3]]
    profiles = ("harmony-flagship", "harmony-flagship", "harmony-lowend")
    files = [
        session(p, tmp_path / "phones", profile=pr) for p, pr in zip(made, profiles, strict=True)
    ]
    phones = load_phones(files)
    grid = Grid(("llama-3.2-1b",), ("int4-g128", "int8"), ("harmony-flagship", "harmony-lowend"))
    lab = Lab(grid, phones)
    points = lab.points()
    assert len(points) == 2 * 2 + 2 * 1
    for p in points:
        phone = next(x for x in phones if x.serial == p.phone)
        assert p.config["profile"] == phone.profile
        assert p.config["backend_options"]["session"] == phone.path
    assert len({p.key for p in points}) == 6
    # the same session under another name is the same phone: the same keys
    renamed = tmp_path / "renamed.toml"
    renamed.write_text(Path(files[0]).read_text())
    again = Lab(grid, load_phones([renamed, *files[1:]]))
    assert [p.key for p in again.points()] == [p.key for p in points]
    assert lab.points_per_phone() == {SERIALS[0]: 2, SERIALS[1]: 2, SERIALS[2]: 2}


def test_a_phone_no_worker_declares_fails_its_points_at_once(tmp_path):
    from distributed import Client, LocalCluster

    phone = FakePhone.create(tmp_path / "p", "hdc", serial=SERIALS[0])
    lab = Lab(
        Grid(("llama-3.2-1b",), ("int8",), ("harmony-flagship",)),
        load_phones([session(phone, tmp_path)]),
    )
    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster:
        with Client(cluster) as client:
            summary = run_sweep(
                lab, SweepStore("none", tmp_path), client=client, show_progress=False
            )
    assert summary.failed == 1 and summary.phones[SERIALS[0]]["failed"] == 1
    error = summary.phones[SERIALS[0]]["error"]
    assert f"--resources phone-{SERIALS[0]}=1" in error and len(error) < 200
    assert not (tmp_path / "p" / "state.json").exists()  # the phone was never asked


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        ({"device": {"transport": "local"}}, "field 'device.transport' = 'local'"),
        ({"device": {"profile": ""}}, "field 'device.profile' = ''"),
        ({"benchmark": {"command": ""}}, "field 'benchmark.command' = ''"),
        ("twice", "field 'device.serial'"),
        ("profiles", "--profiles 'harmony-lowend': no phone has it (theirs: harmony-flagship)"),
        ("workers", "--workers 2: a lab has one worker per phone"),
        ("backend", "--backend host: with --sessions the phones measure"),
    ],
)
def test_bad_lab_input_is_one_line_exit_2_nothing_written(tmp_path, capsys, change, expect):
    phone = FakePhone.create(tmp_path / "p", "hdc", serial=SERIALS[0])
    path = session(phone, tmp_path / "phones", **(change if isinstance(change, dict) else {}))
    files = [str(path)] * (2 if change == "twice" else 1)
    extra = {
        "profiles": ["--profiles", "harmony-lowend"],
        "workers": ["--workers", "2"],
        "backend": ["--backend", "host"],
    }.get(change if isinstance(change, str) else "", [])
    out = tmp_path / "out"
    argv = ["sweep", "--name", "bad", "--sessions", *files, *GRID, "--out-dir", str(out), *extra]
    assert main(argv) == 2
    assert expect in one_line(capsys.readouterr().err)
    assert not out.exists()


def dask_worker(address: str, serial: str) -> subprocess.Popen:
    """`dask worker ADDR --resources phone-SERIAL=1`, as the how-to starts one next to a phone."""
    import os
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    argv = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1"]
    argv += ["--resources", f"phone-{serial}=1", "--name", f"phone-{serial}"]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_phones_on_other_hosts_join_through_the_scheduler(lab, tmp_path, capsys, monkeypatch):
    """Two phones' `dask worker` processes join a running scheduler; a third phone has none (its
    points fail at once, naming the command that would add it); then the second phone's worker
    is killed mid-sweep and its remaining points fail after LOST_WORKER_S."""
    import time

    from distributed import Client, LocalCluster

    import harmony_ref.sweep.lab as lab_module

    phones, sessions = lab
    for p in phones:
        p.reconfigure(faults={})
    with LocalCluster(
        n_workers=0, processes=False, protocol="tcp://", dashboard_address=":0"
    ) as cluster:
        address = cluster.scheduler_address
        workers = [dask_worker(address, s) for s in SERIALS[:2]]
        try:
            with Client(address) as client:
                client.wait_for_workers(2, timeout=120)
            argv = ["sweep", "--name", "remote", "--sessions", *map(str, sessions[:3]), *GRID]
            argv += ["--out-dir", str(tmp_path), "--scheduler", address]
            assert main(argv) == 1
            out = capsys.readouterr().out
            for serial in SERIALS[:2]:
                assert f"phone {serial}: 4 points: 4 computed, 0 reused, 0 failed" in out
            line = next(ln for ln in out.splitlines() if f"phone {SERIALS[2]}:" in ln)
            assert "4 failed (first: phone " in line
            df = pd.read_parquet(tmp_path / "remote" / "points.parquet")
            (error,) = set(df.loc[df["serial"] == SERIALS[2], "error"])
            assert error == (
                f"phone {SERIALS[2]}: no Dask worker declares resource phone-{SERIALS[2]} (start "
                f"one next to it: dask worker {address} --nthreads 1 --resources "
                f"phone-{SERIALS[2]}=1)"
            )
            assert len(error) < 200

            monkeypatch.setattr(lab_module, "LOST_WORKER_S", 1.0)
            killed = []

            def kill_second(done, client):
                if not killed:
                    workers[1].kill()
                    killed.append(time.monotonic())

            lab2 = Lab(
                Grid(("llama-3.2-1b",), ("int4-g128", "int8"), ("harmony-flagship",)),
                load_phones(sessions[:2]),
            )
            with Client(address) as client:
                summary = run_sweep(
                    lab2,
                    SweepStore("lost", tmp_path),
                    client=client,
                    on_result=kill_second,
                    show_progress=False,
                )
        finally:
            for w in workers:
                w.kill()
                w.wait(timeout=30)
    assert summary.phones[SERIALS[0]]["ok"] == 2 and summary.phones[SERIALS[0]]["failed"] == 0
    lost = summary.phones[SERIALS[1]]
    assert lost["failed"] >= 1 and lost["ok"] + lost["failed"] == 2
    assert lost["error"].startswith(f"phone {SERIALS[1]}: its Dask worker (resource phone-")
    assert "left the cluster for over 1 s" in lost["error"]


def test_a_grid_file_names_its_phones(tmp_path, capsys):
    """A sweep TOML's `sessions` (relative to it) makes the same lab as --sessions."""
    made = [FakePhone.create(tmp_path / s, "hdc", serial=s) for s in SERIALS[:2]]
    for p in made:
        session(p, tmp_path / "phones")
    grid_file = tmp_path / "grid.toml"
    names = [f"phones/{s}.toml" for s in SERIALS[:2]]

    def write(profiles):
        grid_file.write_text(
            'models = ["llama-3.2-1b"]\npolicies = ["int4-g128", "int8"]\n'
            f"profiles = {json.dumps(profiles)}\nsessions = {json.dumps(names)}\n"
        )

    write(["harmony-flagship"])
    from harmony_ref.sweep.grid import grid_from_toml

    grid = grid_from_toml(grid_file)
    assert grid.sessions == tuple(str(tmp_path / n) for n in names)
    lab = Lab(grid, load_phones(grid.sessions))
    assert lab.points_per_phone() == {SERIALS[0]: 2, SERIALS[1]: 2}
    out = tmp_path / "out"
    argv = ["sweep", "--name", "g", "--grid", str(grid_file), "--out-dir", str(out)]
    assert main([*argv, "--workers", "2"]) == 2  # a lab: its workers are its phones
    assert "--workers 2: a lab has one worker per phone" in one_line(capsys.readouterr().err)
    assert main([*argv, "--sessions", str(tmp_path / names[0])]) == 2
    assert "lists sessions too" in one_line(capsys.readouterr().err)
    write(["harmony-lowend"])
    assert main(argv) == 2
    line = one_line(capsys.readouterr().err)
    assert "field 'profiles' = 'harmony-lowend': no phone has it" in line
    assert not out.exists()
