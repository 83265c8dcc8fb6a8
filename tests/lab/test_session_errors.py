"""Every error of the session path is one line under 200 characters naming the file, field or
serial; what does not fit (the telemetry script, the benchmark's stderr) goes to --verbose. The
note that --prompt / --new differ from what the command ran appears only when they were given.
Against the fake phone (tests/fake_device)."""

import pytest

from harmony_ref.cli import main
from tests.lab.test_session import fresh, hdc_phone, phones  # noqa: F401

LIMIT = 200


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert len(lines[0]) < LIMIT, f"{len(lines[0])} characters: {lines[0]}"
    assert "Traceback" not in err
    return lines[0]


def measure(tmp_path, *extra, quiet=True):
    """`measure --session`; quiet: --json (no progress lines on stderr, only the error)."""
    runs = tmp_path / "runs"
    json = ["--json"] if quiet else []
    path = str(tmp_path / "phone.toml")
    return main(["measure", "--session", path, "--out-dir", str(runs), *json, *extra])


def test_device_gone_mid_run_is_one_line_and_the_script_goes_to_verbose(
    hdc_phone,  # noqa: F811
    tmp_path,
    capsys,
):
    fresh(hdc_phone, tmp_path, faults={"vanish_on_run": 1}, cooldown={"enabled": False})
    assert measure(tmp_path) == 2
    line = one_line(capsys.readouterr().err)
    assert hdc_phone.serial in line and "no result recorded" in line
    assert "@@uptime" not in line and "grep" not in line
    fresh(hdc_phone, tmp_path, faults={"vanish_on_run": 1}, cooldown={"enabled": False})
    assert measure(tmp_path, "--verbose") == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0] == line
    assert "script:" in err and ("@@uptime" in err or "llama-bench" in err)


def test_a_timeout_is_one_line(hdc_phone, tmp_path, capsys):  # noqa: F811
    fresh(
        hdc_phone,
        tmp_path,
        faults={"hang_on_run": 1},
        benchmark={"repeats": 1, "timeout_s": 1.0},
        cooldown={"enabled": False},
    )
    assert measure(tmp_path) == 1
    line = one_line(capsys.readouterr().err)
    assert "timed out after 1 s" in line and hdc_phone.serial in line


def test_a_failing_benchmark_is_one_line(hdc_phone, tmp_path, capsys):  # noqa: F811
    fresh(
        hdc_phone,
        tmp_path,
        benchmark={
            "repeats": 1,
            "command": "{work_dir}/llama-bench -m {work_dir}/missing.gguf -p 64 -n 16 -o json",
        },
        cooldown={"enabled": False},
    )
    assert measure(tmp_path) == 1
    line = one_line(capsys.readouterr().err)
    assert "exited with code 1" in line and "failed to load model" in line
    assert hdc_phone.serial in line


def test_a_cooldown_that_never_ends_is_one_line(hdc_phone, tmp_path, capsys):  # noqa: F811
    fresh(
        hdc_phone,
        tmp_path,
        die_c=58.0,
        faults={"stuck_zone": True},
        cooldown={"threshold_c": 38.0, "max_wait_s": 300.0, "check_interval_s": 100.0},
    )
    assert measure(tmp_path) == 1
    line = one_line(capsys.readouterr().err)
    assert "cooldown.max_wait_s" in line and hdc_phone.serial in line


def test_a_truncated_push_is_one_line(hdc_phone, tmp_path, capsys):  # noqa: F811
    fresh(hdc_phone, tmp_path, faults={"truncate_pushes": 1}, cooldown={"enabled": False})
    assert measure(tmp_path) == 1
    line = one_line(capsys.readouterr().err)
    assert "truncated or corrupted" in line and hdc_phone.serial in line


@pytest.mark.parametrize(
    "flags, note",
    [([], False), (["--prompt", "512"], True), (["--new", "16"], True)],
)
def test_the_scenario_note_only_for_flags_given(hdc_phone, tmp_path, capsys, flags, note):  # noqa: F811
    fresh(hdc_phone, tmp_path, benchmark={"repeats": 1}, cooldown={"enabled": False})
    assert (
        measure(tmp_path, "--model", "llama-3.2-1b", "--policy", "int4-g32", *flags, quiet=False)
        == 0
    )
    err = capsys.readouterr().err
    assert ("note: the command ran 64 prompt / 1024 new tokens" in err) is note, err
    if note:
        assert flags[0] in err.split("note:")[1]
