"""The `executorch` backend (backends/executorch.py): the runner's PyTorchObserver lines read
into the metric names every backend uses (no ExecuTorch needed), what `run --backend executorch`
and `export --format pte` refuse in one line (the latter also where the extra is installed, by
hiding it), and (with the executorch extra) a real program run as a device under test: the
session's tiny w4a8-g32 program (tests/conftest.py `tiny_programs`), skipped without the extra,
failed instead under HARMONY_REF_EXECUTORCH_TESTS=required (.ci/run)."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from harmony_ref.backends.executorch import runner_metrics
from harmony_ref.backends.executorch_runner import observer_stats
from harmony_ref.cli import main
from harmony_ref.lab.errors import BackendError


def _line(start, prompt_end, first, end, load=(0.0, 250.0), prompt=64, gen=15) -> str:
    stats = observer_stats(prompt, gen, load, (start, prompt_end, first, end), 1.5)
    return "PyTorchObserver " + json.dumps(stats)


def test_runner_lines_become_medians_with_samples():
    text = "\n".join(
        [
            "some log line",
            _line(1000, 1100, 1101, 1400),  # prefill 100 ms, 15 steps in 300 ms
            _line(2000, 2080, 2081, 2380),  # prefill 80 ms
            _line(3000, 3120, 3121, 3450),  # prefill 120 ms, 15 steps in 330 ms
            "peak_rss_mb 812.5",
        ]
    )
    m = runner_metrics(text)
    assert m["prefill_ms"].value == pytest.approx(100.0)
    assert m["prefill_ms"].samples == pytest.approx((100.0, 80.0, 120.0))
    assert m["prefill_tokens_per_s"].value == pytest.approx(640.0)  # 64 tokens / 0.1 s
    assert m["decode_step_ms"].value == pytest.approx(20.0)
    assert m["decode_tokens_per_s"].value == pytest.approx(50.0)
    assert m["ttft_ms"].value == pytest.approx(101.0)
    assert m["model_load_ms"].value == pytest.approx(250.0)
    assert m["peak_memory_mb"].value == pytest.approx(812.5)
    assert all(x.kind == "measured" for x in m)


@pytest.mark.parametrize(
    "text,match",
    [
        ("nothing here", "no PyTorchObserver"),
        (_line(1000, 1100, 1101, 1400), "no PyTorchObserver or peak_rss_mb"),
        (_line(1000, 900, 1101, 1400) + "\npeak_rss_mb 10", "timestamps out of order"),
    ],
)
def test_runner_output_that_is_not_a_measurement(text, match):
    with pytest.raises(BackendError, match=match):
        runner_metrics(text)


def test_pte_model_needs_the_executorch_backend(capsys):
    rc = main(["run", "--model", "x.pte", "--skip", "host,accuracy,coldstart,thermal"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "runs with --backend executorch" in err and "\n" not in err


def test_without_the_extra_export_pte_is_one_line(capsys, monkeypatch):
    # as without the extra, also where it is installed: executorch cannot be imported
    monkeypatch.setitem(sys.modules, "executorch", None)
    monkeypatch.setitem(sys.modules, "executorch.version", None)
    rc = main(
        [
            "export",
            "--model",
            "smollm2-135m",
            "--policy",
            "fp32",
            "--format",
            "pte",
            "--out",
            "/nonexistent-dir-x/m.pte",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "ExecuTorch is not installed" in err and len(err) < 200


@pytest.fixture
def tiny_program(tiny_programs):
    return tiny_programs.path("llama", "w4a8-g32")


def test_run_backend_executorch(tiny_program, tmp_path, capsys):
    args = ["run", "--backend", "executorch", "--model", str(tiny_program), "--prompt-tokens", "8"]
    args += ["--new-tokens", "4", "--context-tokens", "32", "--skip"]
    args += ["host,accuracy,coldstart,thermal,fidelity", "--json", "--out-dir", str(tmp_path)]
    args += ["--history", str(tmp_path / "h.sqlite")]
    assert main(args) == 0
    rec = json.loads(capsys.readouterr().out)
    names = set(rec["metrics"])
    want = {"ttft_ms", "prefill_ms", "prefill_tokens_per_s", "decode_step_ms", "e2e_ms"}
    assert want | {"decode_tokens_per_s", "model_load_ms", "peak_memory_mb"} <= names
    assert rec["config"]["backend"] == "executorch" and rec["config"]["policy"] == "w4a8-g32"
    assert len(rec["metrics"]["prefill_ms"]["samples"]) == 3


def test_run_backend_executorch_refusals(tiny_program, tmp_path, capsys):
    base = ["run", "--backend", "executorch", "--skip", "host,accuracy,coldstart,thermal"]
    cases = [
        (["--model", str(tiny_program), "--policy", "int8"], "was exported with --policy w4a8"),
        (
            ["--model", str(tiny_program), "--prompt-tokens", "30", "--new-tokens", "8"],
            "exceed the program's 32 positions",
        ),
    ]
    bare = tmp_path / "bare.pte"
    shutil.copy(tiny_program, bare)
    cases.append((["--model", str(bare)], "no manifest bare.pte.manifest.json"))
    for extra, match in cases:
        assert main(base + extra + ["--no-record"]) == 2
        err = capsys.readouterr().err.strip()
        assert match in err and "\n" not in err and len(err) < 200, err


@pytest.mark.parametrize(
    "argv,match",
    [
        (["accuracy", "--model", "{d}/junk.pte"], "not an ExecuTorch program (no ET12"),
        (["accuracy", "--model", "{d}/none.pte"], "none.pte: no such file"),
        (
            ["export", "--model", "smollm2-135m", "--policy", "q4_0", "--format", "gguf"]
            + ["--max-context", "64", "--out", "{d}/m.gguf"],
            "--max-context 64: only --format pte takes it",
        ),
    ],
)
def test_pte_bad_input_is_one_line(argv, match, tmp_path, capsys):
    (tmp_path / "junk.pte").write_bytes(b"GGUF" + bytes(100))
    assert main([a.replace("{d}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and "\n" not in err and len(err) < 200, err
    assert not (tmp_path / "m.gguf").exists()
