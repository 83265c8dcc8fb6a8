"""Issue 16 items 3, 6 and 10 (files): `run` validates before it runs; output paths are checked
before the work starts, one way in every command; a full disk is one line; records are 0644;
stale temporary files are cleaned up, a live one is not."""

import errno
import os
import stat
import subprocess
import time

import pytest

from harmony_ref import _io
from harmony_ref.cli import main
from harmony_ref.job import main as job
from harmony_ref.track.record import latest_record
from tests.fixtures.errors import shows_path

FAST = ["--skip", "host,accuracy,coldstart,thermal"]


@pytest.fixture
def no_work(monkeypatch):
    """Any work started is a test failure: the check must come first."""

    def boom(*a, **k):
        raise AssertionError("the work started before the arguments were checked")

    monkeypatch.setattr(job, "run_job", boom)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--model", "lama-3.2-3b"], "did you mean 'llama-3.2-3b'"),
        (["--profile", "harmony-flagshp"], "did you mean 'harmony-flagship'"),
        (["--policy", "int4-g12"], "did you mean 'int4-g128'"),
        (["--context", "16"], "context_tokens = 16"),
        (
            ["--backend", "command", "--command", "echo", "--command-format", "mslit"],
            "did you mean 'mslite'",
        ),
    ],
)
def test_run_validates_up_front(tmp_path, capsys, no_work, argv, says):
    out = tmp_path / "runs"
    assert main(["run", *argv, *FAST, "--out-dir", str(out)]) == 2
    assert says in capsys.readouterr().err
    assert not out.exists()


def test_run_with_a_bad_profile_file(tmp_path, capsys, no_work):
    bad = tmp_path / "p.toml"
    bad.write_text('name = "x"\n')
    assert main(["run", "--profile", str(bad), "--out-dir", str(tmp_path / "r")]) == 2
    assert "p.toml" in capsys.readouterr().err and not (tmp_path / "r").exists()


def test_a_run_where_everything_failed_is_not_latest(tmp_path, monkeypatch, capsys):
    def broken(config):
        raise RuntimeError("kaput")

    monkeypatch.setattr(job, "PARTS", [job.Part("predicted", "predicted", broken)])
    out = tmp_path / "runs"
    assert main(["run", "--out-dir", str(out)]) == 1
    assert latest_record(out) is None
    assert len(list((out / "failed").glob("run-*.json"))) == 1
    assert (
        main(
            [
                "gate",
                "--baseline",
                "results/baseline.json",
                "--current",
                "latest",
                "--out-dir",
                str(out),
            ]
        )
        == 2
    )


@pytest.mark.parametrize(
    "make, argv",
    [
        ("file", ["run", "--out-dir", "{p}"]),
        ("dir", ["calibrate", "--out", "{p}"]),
        ("dir", ["plan", "--budget-mb", "40", "--out", "{p}"]),
        ("dir", ["export", "--policy", "int8", "{p}"]),
        ("dir", ["thermal", "--plot", "{p}"]),
        ("dir", ["compare", "--plot", "{p}"]),
        (
            "dir",
            [
                "gate",
                "--baseline",
                "results/baseline.json",
                "--current",
                "results/baseline.json",
                "--summary",
                "{p}",
            ],
        ),
        ("file_parent", ["run", "--out-dir", "{p}"]),
        ("file_parent", ["export", "--policy", "int8", "{p}"]),
    ],
)
def test_output_paths_are_checked_before_the_work(tmp_path, capsys, monkeypatch, make, argv):
    import harmony_ref.calibrate.host as cal_host
    import harmony_ref.calibrate.run as cal
    import harmony_ref.checkpoint.artifact as art
    import harmony_ref.eval.plan as plan
    import harmony_ref.runtime.minilm as minilm

    def boom(*a, **k):
        raise AssertionError("work started before the output path was checked")

    for mod, name in (
        (job, "run_job"),
        (cal, "calibrate_host"),
        (cal_host, "calibrate_host_runs"),
        (plan, "plan_policy"),
        (art, "export_artifact"),
        (minilm, "real_model"),
    ):
        monkeypatch.setattr(mod, name, boom)
    p = tmp_path / "target"
    if make == "file":
        p.write_text("x")
    elif make == "dir":
        p.mkdir()
    else:  # a file where a parent directory is needed
        (tmp_path / "afile").write_text("x")
        p = tmp_path / "afile" / "sub" / "out.json"
    code = main([a.format(p=p) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert shows_path(err, p if make != "file_parent" else tmp_path / "afile"), err
    assert "Traceback" not in err


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tiny tmpfs needs root")
def test_a_full_disk_is_one_line_and_keeps_the_old_file(tmp_path, capsys):
    full = tmp_path / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)]).returncode:
        pytest.skip("mount not permitted here")
    try:
        base = full / "baseline.json"
        base.write_text(open("results/baseline.json").read())
        before = base.read_bytes()
        (full / "filler").write_bytes(b"x" * (64 * 1024 - len(before) - 4096))
        code = main(
            [
                "gate",
                "--baseline",
                str(base),
                "--current",
                "results/baseline.json",
                "--update-baseline",
            ]
        )
        err = capsys.readouterr().err
        assert code == 2 and "No space left on device" in err
        assert len(err.strip().splitlines()) == 1
        assert base.read_bytes() == before
        assert not [f for f in os.listdir(full) if f.startswith(".tmp-")]
        assert main(["run", *FAST, "--out-dir", str(full / "runs")]) == 2
        assert "No space left on device" in capsys.readouterr().err
    finally:
        subprocess.run(["umount", str(full)])


def test_enospc_from_any_writer_is_exit_2(tmp_path, capsys, monkeypatch):
    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "x"))

    monkeypatch.setattr(_io, "_write_temp", full)
    assert main(["run", *FAST, "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and str(tmp_path) in err


def test_records_are_written_0644_under_a_normal_umask(tmp_path):
    old = os.umask(0o022)
    try:
        p = _io.write_text_atomic(tmp_path / "r.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(p.stat().st_mode) == 0o644


def test_stale_temps_are_removed_live_ones_kept(tmp_path):
    stale, live = tmp_path / ".tmp-dead", tmp_path / ".tmp-live"
    stale.write_text("half")
    live.write_text("being written")
    old = time.time() - 2 * _io.STALE_TMP_S
    os.utime(stale, (old, old))
    _io.write_text_atomic(tmp_path / "r.json", "{}")
    assert not stale.exists() and live.exists()


def test_git_ignores_temporary_files():
    r = subprocess.run(["git", "check-ignore", "-q", "results/runs/.tmp-abc123"])
    assert r.returncode == 0
    r = subprocess.run(["git", "check-ignore", "-q", "results/.tmp-abc123"])
    assert r.returncode == 0
