"""Held out means held out, at the edges of the user's own inputs: a held-out point that is the
same measurement as a fitted one under another id (a figures file, an op-times file, a
workload listed twice, a --held-out file repeating a --workloads item) is refused in one line
or shown as "not scored", never scored as the fit's held-out error; a figure marked "fit" that
no runtime was fitted on is refused (it would be reported as the calibration's error); and
`calibrate --set` says which points scored it, or that none did."""

from __future__ import annotations

import json
import types

import pytest

from harmony_ref.cli import main

FIT_FIGURE = """[[figure]]
id = "{id}"
source = "somewhere"
profile = "dimensity-9300"
runtime = "llama.cpp-cpu"
threads = 6
model = "llama-2-7b"
policy = "int4-g32-sym"
prompt_tokens = 64
new_tokens = 128
metric = "decode_tokens_per_s"
value = {value}
split = "{split}"
"""


def _shipped_fit_figures(runtime: str = "llama.cpp-cpu") -> str:
    from importlib import resources

    text = (resources.files("harmony_ref") / "data" / "fidelity" / "published.toml").read_text()
    blocks = text.split("[[figure]]")[1:]
    return "".join("[[figure]]" + b for b in blocks if f'runtime = "{runtime}"' in b)


def test_fidelity_refuses_a_held_out_figure_that_repeats_a_fitted_one(tmp_path, capsys):
    """xiao24-d9300-llama2-7b-decode (fitted on by llama.cpp-cpu), under another id and split
    "score": it was scored, its error the fit's own residual."""
    path = tmp_path / "mine.toml"
    path.write_text(FIT_FIGURE.format(id="my-copy", value=8.22, split="score"))
    assert main(["fidelity", "--sets", "phones", "--figures", str(path), "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "'my-copy' is the same measurement as fit point 'xiao24-d9300-llama2-7b-decode'" in err
    # another configuration of the same phone is held out: scored
    path.write_text(
        FIT_FIGURE.format(id="mine", value=8.0, split="score").replace(
            "prompt_tokens = 64", "prompt_tokens = 32"
        )
    )
    assert main(["fidelity", "--sets", "phones", "--figures", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {p["id"]: p["split"] for p in out["points"]}["mine"] == "score"


def test_fidelity_refuses_a_fit_figure_no_runtime_was_fitted_on(tmp_path, capsys):
    """It would count among the "fitted" points and its error would become the calibration's
    (fidelity_phones_calibration_max_error_pct) when nothing was fitted on it."""
    path = tmp_path / "mine.toml"
    path.write_text(
        FIT_FIGURE.format(id="mine-fit", value=7.0, split="fit").replace(
            "prompt_tokens = 64", "prompt_tokens = 32"
        )
    )
    assert main(["fidelity", "--sets", "phones", "--figures", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "mine-fit has split 'fit' but runtime llama.cpp-cpu was not fitted on it" in err


def test_calibrate_set_refuses_a_held_out_figure_repeating_a_fit_one(tmp_path, capsys):
    path = tmp_path / "F.toml"
    path.write_text(
        _shipped_fit_figures() + FIT_FIGURE.format(id="copy", value=8.22, split="score")
    )
    out = tmp_path / "rt.toml"
    argv = ["calibrate", "--set", "phones", "--runtime", "llama.cpp-cpu", "--figures", str(path)]
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--set phones: held-out point 'copy' is the same measurement as fit point" in err
    assert not out.exists()


def test_calibrate_set_says_which_points_scored_it_or_that_none_did(tmp_path, capsys):
    out = tmp_path / "rt.toml"
    path = tmp_path / "F.toml"
    path.write_text(_shipped_fit_figures())
    argv = ["calibrate", "--set", "phones", "--runtime", "llama.cpp-cpu", "--figures", str(path)]
    assert main([*argv, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "held_out_mape_pct: not scored (no split 'score' points" in text
    assert main([*argv, "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["held_out_mape_pct"] is None
    path.write_text(
        _shipped_fit_figures()
        + FIT_FIGURE.format(id="other", value=8.0, split="score").replace(
            "prompt_tokens = 64", "prompt_tokens = 32"
        )
    )
    assert main([*argv, "--out", str(out)]) == 0
    assert "over the 1 scored_on points" in capsys.readouterr().out


OPS = """name,rate_class,ops,bytes,launches,time_us,holdout
a,fp16,1e9,1e6,1,1000,0
b,fp16,2e9,2e6,1,2000,0
c,fp16,4e9,4e6,1,4100,0
v,vector,1e6,8e7,1,5000,0
w,vector,2e6,1.6e8,1,10000,0
"""


@pytest.mark.parametrize(
    "row, words",
    [
        ("d,fp16,2e9,2e6,1,2050,1", "line 7: held-out op 'd' is the same op as fitted line 3"),
        ("b,fp16,3e9,3e6,1,3000,1", "line 7: name 'b' is also line 3's"),
    ],
)
def test_an_op_file_whose_held_out_row_repeats_a_fitted_one_is_refused(
    tmp_path, capsys, row, words
):
    src = tmp_path / "ops.csv"
    src.write_text(OPS + row + "\n")
    out = tmp_path / "p.toml"
    assert main(["calibrate", "--backend", "command", "--ops", str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1
    # a held-out op of its own size is scored
    src.write_text(OPS + "d,fp16,3e9,3e6,1,3000,1\n")
    assert main(["calibrate", "--backend", "command", "--ops", str(src), "--out", str(out)]) == 0
    assert "ops_held_out: 1" in capsys.readouterr().out


def test_a_device_phase_calibration_never_scores_a_repeat_of_a_fit_workload(tmp_path, capsys):
    """The same workload as items 0 and 2 (2 held out by position): its rows are shown as a
    repeat of the fit, and the held-out MAPE is over item 5 alone."""
    from tests.calibrate.test_calibrate import phone_command

    items = [
        "llama-3.2-1b:int4-g32:512:128",
        "qwen2.5-0.5b:int8:256:64",
        "llama-3.2-1b:int4-g32:512:128",
        "llama-3.2-3b:int4-g128:1024:32",
        "qwen2.5-1.5b:mixed:128:128",
        "qwen2.5-0.5b:int8:128:32",
    ]
    out = tmp_path / "phone.toml"
    argv = ["calibrate", "--backend", "command", "--command", phone_command()]
    argv += ["--format", "llama-bench", "--workloads", ";".join(items)]
    argv += ["--profile", "harmony-flagship", "--out", str(out), "--name", "phone", "--json"]
    assert main(argv) == 0
    r = json.loads(capsys.readouterr().out)
    sets = {(p["workload"], p["set"]) for p in r["phases"]}
    repeat = next(w for w, s in sets if s == "repeat of fit")
    assert (repeat, "fit") in sets
    held = {w for w, s in sets if s == "held-out"}
    assert len(held) == 1 and repeat not in held and r["held_out_workloads"] == 1


def _point(pid, split, prompt, new):
    from harmony_ref.calibrate.phases import Workload, phase_configs
    from harmony_ref.calibrate.points import Point

    _, phases = phase_configs(
        Workload("llama-3.2-1b", "int8", prompt, new, threads=2), "llama-bench"
    )
    return [
        Point(f"{pid}:{m}", "records", "xeon-2core-kvm", "llama.cpp-host", 2, cfg, m, 10.0, split)
        for m, cfg in phases.items()
    ]


def test_a_runtime_phase_fit_never_scores_a_held_out_point_repeating_a_fit_one(
    tmp_path, monkeypatch
):
    """llama-bench's `pp 64` of two workloads differing only in new tokens is one measurement:
    with the first fitted and the second held out, the second's prefill point is shown (its
    twin named) and not scored; its decode point (another configuration) is."""
    import harmony_ref.calibrate.fit_runtime as fr
    from harmony_ref.calibrate.phases import fit_runtime_on_points
    from harmony_ref.device.runtime import load_runtime

    report = types.SimpleNamespace(fitted=("matmul",), not_fitted=(), fit_mape_pct=0.0)
    monkeypatch.setattr(fr, "fit_on_points", lambda base, pts, params: (base, report))
    points = (
        _point("w0", "fit", 64, 16) + _point("w1", "fit", 32, 8) + _point("w2", "score", 64, 32)
    )
    base = load_runtime("llama.cpp-host")
    out = tmp_path / "rt.toml"
    table, summary = fit_runtime_on_points(base, points, ("matmul",), out, "t", "xeon", "how")
    rows = {r["id"]: r for r in table}
    assert rows["w2:prefill_ms"]["same_as_fit"] == "w0:prefill_ms"
    assert not rows["w2:prefill_ms"]["scored"] and rows["w2:decode_step_ms"]["scored"]
    assert summary["not_scored"] == {"w2:prefill_ms": "w0:prefill_ms"}
    assert summary["held_out_points"] == 1
    assert summary["held_out_prefill_mape_pct"] is None
    assert load_runtime(out).calibration.scored_on == ("w2:decode_step_ms",)


def test_a_held_out_file_repeating_a_workloads_item_is_refused(tmp_path):
    from harmony_ref.calibrate.executorch import ProgramWorkload, check_workloads_disjoint

    prog = tmp_path / "m.pte"
    fit = [ProgramWorkload(str(prog), 8, 4, 1), ProgramWorkload(str(prog), 16, 4, 2)]
    check_workloads_disjoint(fit, [ProgramWorkload(str(prog), 12, 6, 1)])
    same = ProgramWorkload(str(tmp_path / "." / "m.pte"), 16, 4, 2)  # another spelling
    with pytest.raises(ValueError, match="--held-out item m-p16-n4-t2: also a --workloads item"):
        check_workloads_disjoint(fit, [same])
