"""Whose machine the fidelity numbers are of: the host and llama.cpp fixtures name the CPU they
were measured on (checked against the fixtures' own records of it), `run` and `fidelity` say
when that is not the CPU they run on, and a --profile with its own calibration reports that
calibration's held-out error (fidelity_profile_mape_pct) in place of the host fixtures'. The
record stays one the gate compares with results/baseline.json."""

import json
import re
from pathlib import Path

import pytest

from harmony_ref.calibrate.host_runs import load_host_manifest, sessions
from harmony_ref.calibrate.llamacpp import _tests, load_llamacpp_manifest
from harmony_ref.cli import main
from harmony_ref.job import main as job
from harmony_ref.track import fidelity as fd

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_CPU = "Intel(R) Xeon(R) Processor (family 6 model 167)"
OTHER_CPU = "AMD EPYC (family 25 model 17)"
ONLY_FIDELITY = ["--skip", ",".join(n for n in job.part_names() if n != "fidelity")]


def test_the_fixture_cpus_are_what_the_fixtures_recorded():
    host = load_host_manifest()
    for s in sessions(host):  # "Model name=...; CPU family=6; Model=167", as lscpu says it
        f = dict(kv.split("=", 1) for kv in s["machine"]["lscpu_model"].split("; "))
        assert host.cpu_id == f"{f['Model name']} (family {f['CPU family']} model {f['Model']})"
    llama = load_llamacpp_manifest()
    family = re.search(r"\(family (\d+) model (\d+)\)$", llama.cpu_id)
    assert family and f"family {family[1]} model {family[2]}" in llama.machine
    for run in llama.run:  # llama-bench's cpu_info is the model name
        for test in _tests(llama, run):
            assert llama.cpu_id == f"{test['cpu_info']} {family[0]}", run.id
    assert fd.fixture_cpus() == {"host": host.cpu_id, "llama.cpp": llama.cpu_id}


def test_the_note_says_when_the_fixtures_are_of_another_cpu():
    cpus = {"host": FIXTURE_CPU, "llama.cpp": FIXTURE_CPU}
    assert fd.machine_note(cpus, OTHER_CPU) == (
        f"host and llama.cpp fixtures measured on {FIXTURE_CPU}, not on this machine's {OTHER_CPU}"
    )
    assert fd.machine_note(cpus, FIXTURE_CPU) == (
        f"host and llama.cpp fixtures measured on this machine's CPU, {FIXTURE_CPU}"
    )
    mixed = fd.machine_note({"host": OTHER_CPU, "llama.cpp": FIXTURE_CPU}, OTHER_CPU)
    assert mixed.startswith("host fixtures measured on this machine's CPU") and (
        f"llama.cpp fixtures measured on {FIXTURE_CPU}, not on" in mixed
    )
    assert fd.machine_note({}, OTHER_CPU) == ""


def _run(capsys, *argv):
    code = main(["run", *ONLY_FIDELITY, "--no-record", *argv])
    out = capsys.readouterr().out
    assert code == 0
    return out


@pytest.mark.parametrize("here", [OTHER_CPU, FIXTURE_CPU])
def test_run_prints_and_records_whose_machine(capsys, monkeypatch, here):
    import harmony_ref.backends.host_timing as ht

    monkeypatch.setattr(ht, "cpu_id", lambda: here)
    rec = json.loads(_run(capsys, "--json"))
    part = rec["parts"]["fidelity"]
    assert part["fixture_cpus"] == {"host": FIXTURE_CPU, "llama.cpp": FIXTURE_CPU}
    assert part["this_cpu"] == here
    assert ("not on this machine's" in part["note"]) == (here != FIXTURE_CPU)
    for name in ("fidelity_host_mape_pct", "fidelity_llamacpp_mape_pct"):
        assert f"committed measurements on {FIXTURE_CPU}" in rec["metrics"][name]["description"]
    assert "profile_calibration" not in part and "fidelity_profile_mape_pct" not in rec["metrics"]
    table = _run(capsys)
    assert f"\n{' ' * 26}{part['note']}\n" in table  # the line under the part's status line


# harmony-midrange with the [calibration] `harmony-ref calibrate --backend host` writes (its
# held-out whole-model runs' error: 21.5%), and one whose runtime file carries the held-out error
# (a runtime fitted by `calibrate --set`: 12.5%).
OWN_SECTION = """
[calibration]
held_out_per_op_mape_pct = 9.0
n_fit = 10
n_held_out = 5
fitted_at = "2026-12-05T01:00:00+00:00"
held_out_e2e_mape_pct = 21.5
n_held_out_e2e = 4
"""


def _profiles(tmp_path):
    shipped = ROOT / "harmony_ref" / "device" / "profiles"
    runtimes = ROOT / "harmony_ref" / "device" / "runtimes"
    own = tmp_path / "host.toml"
    own.write_text((shipped / "harmony-midrange.toml").read_text() + OWN_SECTION)
    rt = tmp_path / "my-host-runtime.toml"
    rt.write_text(
        (runtimes / "harmony-ref-host.toml")
        .read_text()
        .replace('name = "harmony-ref-host"', 'name = "my-host-runtime"')
        .replace("held_out_mape_pct = 7.1935", "held_out_mape_pct = 12.5")
    )
    xeon = (shipped / "xeon-2core-kvm.toml").read_text()
    with_rt = tmp_path / "host-rt.toml"
    with_rt.write_text(xeon.replace('"harmony-ref-host"', json.dumps(str(rt))))
    copy = tmp_path / "xeon-copy.toml"  # the shipped runtime's calibration: the fixtures'
    copy.write_text(xeon)
    return own, with_rt, copy


def test_a_profiles_own_calibration_replaces_the_host_fixtures(capsys, tmp_path):
    own, with_rt, copy = _profiles(tmp_path)
    for path, want in ((own, 21.5), (with_rt, 12.5)):
        rec = json.loads(_run(capsys, "--profile", str(path), "--json"))
        m, part = rec["metrics"], rec["parts"]["fidelity"]
        assert m["fidelity_profile_mape_pct"]["value"] == pytest.approx(want)
        assert str(path) in m["fidelity_profile_mape_pct"]["description"]
        assert not [n for n in m if n.startswith("fidelity_host_")]
        assert "fidelity_llamacpp_mape_pct" in m and "fidelity_phones_mape_pct" in m
        assert part["profile_calibration"] == str(path) and "host" not in part["fixture_cpus"]
        assert part["note"].startswith(f"host: the held-out error of {path}'s own calibration")
        assert "llama.cpp fixtures measured on" in part["note"]
    rec = json.loads(_run(capsys, "--profile", str(copy), "--json"))
    assert "fidelity_profile_mape_pct" not in rec["metrics"]
    assert "fidelity_host_mape_pct" in rec["metrics"]


def test_the_record_gates_against_the_committed_baseline(tmp_path, capsys):
    """A fresh fidelity part in the committed baseline's record: same names, units, kinds and
    values, so the gate passes (the new facts and descriptions do not disturb it)."""
    from harmony_ref.config import RunConfig
    from harmony_ref.track.record import load_record, write_json_atomic

    base_path = ROOT / "results" / "baseline.json"
    base = load_record(base_path)
    part = next(p for p in job.PARTS if p.name == "fidelity")
    got, entry = job.run_part_entry(part, RunConfig.from_dict(base.config, str(base_path)))
    assert sorted(got.names()) == sorted(base.parts["fidelity"]["metrics"])
    data = json.loads(base_path.read_text())
    data["metrics"].update(got.to_dict())
    data["parts"]["fidelity"] = json.loads(json.dumps(entry))
    current = write_json_atomic(tmp_path / "current.json", data)
    code = main(["gate", "--baseline", str(base_path), "--current", str(current)])
    out = capsys.readouterr().out
    assert code == 0 and "PASS" in out, out
