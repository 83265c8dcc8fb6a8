"""`check-runtime` end to end on a tiny random GGUF and fake runtimes (tests/fake_device): a
runtime printing a plausible speed with 5x the reference perplexity is flagged and fails the gate;
one within the bound passes; MindSpore Lite all-zeros / not-the-model outputs are flagged; bad
input is exit 2 without a traceback. The real llama-perplexity binary is never run here.

An ExecuTorch program (`--model FILE.pte`, the executorch extra) is run and judged the same way
by harmony-ref itself: the tiny programs at fp32 and w4a8-g32 against their checkpoints, one
built from other weights than its manifest names flagged, and its bad input."""

import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from harmony_ref.checkpoint.assets import sha256_file
from harmony_ref.cli import main
from harmony_ref.track.record import load_record
from tests.fixtures.decoder.tiny import tiny_config, write_tiny_gguf

FAKE = Path(__file__).parents[1] / "fake_device"
PY = shlex.quote(sys.executable)
PPL = f"{PY} {FAKE / 'perplexity.py'} -m {{model}} -f {{corpus}} -c {{context}} --chunks {{chunks}}"
CTX, CHUNKS = 64, 6


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    write_tiny_gguf(path, tiny_config(max_positions=128), seed=3)
    return path


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("HARMONY_REF_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def check(capsys, gguf, out_dir, *extra, commands=(PPL,)):
    argv = [
        "check-runtime",
        "--model",
        str(gguf),
        "--context",
        str(CTX),
        "--chunks",
        str(CHUNKS),
        "--out-dir",
        str(out_dir),
        "--json",
    ]
    for c in commands:
        argv += ["--command", c]
    code = main(argv + list(extra))
    cap = capsys.readouterr()
    return code, (json.loads(cap.out) if cap.out.strip() else None), cap.err


def test_within_bound_passes_and_five_x_fails_the_gate(capsys, gguf, tmp_path, cache, monkeypatch):
    out = tmp_path / "runs"
    monkeypatch.setenv("FAKE_PPL_FACTOR", "1.002")
    code, good, err = check(capsys, gguf, out)
    assert code == 0, err
    run = good["runs"][0]
    assert run["verdict"] == "accurate" and run["reasons"] == []
    m = run["metrics"]
    ref = good["reference"]
    assert ref["chunks"] == CHUNKS and ref["context"] == CTX
    assert m["ppl_ratio_to_reference"]["value"] == pytest.approx(1.002, abs=2e-4)
    assert m["ppl_ratio_bound"]["value"] == pytest.approx(ref["bound_high"])
    # the bound is derived from our own measured int8 ratio, never narrower than 1%
    assert ref["bound_high"] == pytest.approx(1 + max(2 * (ref["expected_ratio"] - 1), 0.01))
    assert m["prefill_tokens_per_s"]["value"] == pytest.approx(2150.0)
    assert "flags" not in m["prefill_tokens_per_s"]
    assert next(iter(cache.joinpath("runtime-check").glob("*.json")))  # the reference is cached
    # ... and its FP32 log-probs sit in the reference cache `accuracy` reads (eval/lm_cache.py)
    assert len(list(cache.joinpath("lm-reference").glob("*/chunk-*.npy"))) == CHUNKS
    baseline = Path(run["record"])

    monkeypatch.setenv("FAKE_PPL_FACTOR", "5")
    code, bad, err = check(capsys, gguf, out)
    assert code == 1
    run = bad["runs"][0]
    assert run["verdict"] == "inaccurate"
    assert "5.000x the FP32 reference" in run["reasons"][0]
    assert bad["reference"] == good["reference"]  # same reference, from the cache
    speed = run["metrics"]["prefill_tokens_per_s"]
    assert speed["value"] == pytest.approx(2150.0) and speed["flags"] == ["inaccurate"]
    assert bad["rows"][0]["speed"].startswith("not a result")
    rec = load_record(run["record"])
    assert rec.metrics.value("runtime_accurate") == 0.0
    assert all("inaccurate" in x.flags for x in rec.metrics)

    # the gate fails on it (exit 1), says why, and refuses it as a baseline
    assert main(["gate", "--baseline", str(baseline), "--current", run["record"]]) == 1
    text = capsys.readouterr().out
    assert "## harmony-ref gate: FAIL" in text
    assert "from a run flagged inaccurate (current): not a result" in text
    assert "5.000x the FP32 reference" in text
    assert main(["gate", "--baseline", str(baseline), "--current", str(baseline)]) == 0
    capsys.readouterr()
    promoted = tmp_path / "baseline.json"
    assert (
        main(["gate", "--baseline", str(promoted), "--current", run["record"], "--update-baseline"])
        == 2
    )
    assert "flagged inaccurate" in capsys.readouterr().err and not promoted.exists()

    # --compare: speed and accuracy side by side from the two records
    assert main(["check-runtime", "--compare", str(baseline), run["record"], "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["verdict"] for r in rows] == ["accurate", "inaccurate"]
    assert rows[0]["speed"] == "2150 tokens/s" and rows[1]["speed"].startswith("not a result")


def test_no_lm_cache_writes_no_cache(capsys, gguf, tmp_path, cache, monkeypatch):
    monkeypatch.setenv("HARMONY_REF_NO_LM_CACHE", "1")
    monkeypatch.setenv("FAKE_PPL_FACTOR", "1.002")
    code, out, err = check(capsys, gguf, tmp_path / "runs")
    assert code == 0, err
    assert not cache.joinpath("runtime-check").exists()
    assert not cache.joinpath("lm-reference").exists()


def test_several_commands_one_table(capsys, gguf, tmp_path, cache):
    fast_wrong = PPL + " --factor 5 --tokens-per-s 4000"
    code, out, err = check(
        capsys, gguf, tmp_path, "--label", "plain", "--label", "amx", commands=(PPL, fast_wrong)
    )
    assert code == 1, err
    got = [(r["runtime"], r["verdict"]) for r in out["rows"]]
    assert got == [("plain", "accurate"), ("amx", "inaccurate")]
    assert out["rows"][0]["speed"] == "2150 tokens/s"
    assert "4000 tokens/s" in out["rows"][1]["speed"]
    assert out["rows"][1]["speed"].startswith("not a result")
    # the table form names the verdict beside the speed
    code = main(
        [
            "check-runtime",
            "--model",
            str(gguf),
            "--context",
            str(CTX),
            "--chunks",
            str(CHUNKS),
            "--out-dir",
            str(tmp_path),
            "--command",
            fast_wrong,
        ]
    )
    text = capsys.readouterr().out
    assert code == 1 and "INACCURATE cmd1: perplexity" in text and "not a result" in text


def test_a_lower_perplexity_than_the_reference_is_flagged(capsys, gguf, tmp_path, cache):
    code, out, _ = check(capsys, gguf, tmp_path, commands=(PPL + " --factor 0.5",))
    assert code == 1 and "did not score the same model and text" in out["runs"][0]["reasons"][0]


def bench(name, exit_code=0):
    return (
        f"{PY} {FAKE / 'benchmark.py'} --format mslite --file {name} --exit {exit_code}"
        " --device-model FAKE-NPU"
    )


@pytest.mark.parametrize(
    "name,exit_code,code,why",
    [
        ("mslite_cosine.txt", 0, 0, None),
        ("mslite_benchmark.txt", 0, 0, None),
        ("mslite_zeros.txt", 0, 1, "all 50 printed values are 0"),
        ("mslite_not_the_model.txt", 1, 1, "Mean bias of all nodes/tensors is too big"),
        ("mslite_low_cosine.txt", 0, 1, "cosine 0.3144 < 0.78: not the model"),
    ],
)
def test_mslite_outputs(capsys, tmp_path, name, exit_code, code, why):
    got, out, err = check(
        capsys, "model.ms", tmp_path, "--format", "mslite", commands=(bench(name, exit_code),)
    )
    assert got == code, err
    run = out["runs"][0]
    if why is None:
        assert run["verdict"] == "accurate" and "e2e_ms" in run["metrics"]
        assert run["provenance"]["device_model"] == "FAKE-NPU"
    else:
        assert run["verdict"] == "inaccurate" and any(why in r for r in run["reasons"])
    if name == "mslite_zeros.txt":  # the tool's cosine reads 1 for zeros; the bias catches it
        assert run["metrics"]["mslite_cosine_distance"]["value"] == 1.0
        assert any(
            "no closer to the calibration outputs than all zeros" in r for r in run["reasons"]
        )
        assert run["metrics"]["e2e_ms"]["flags"] == ["inaccurate"]


@pytest.mark.parametrize(
    "template,fmt,msg",
    [
        ("", "llama-perplexity", "template is empty"),
        ("{model", "llama-perplexity", "malformed template"),
        (
            "run -m {model} -f {corpus} -t {threads}",
            "llama-perplexity",
            "unknown placeholder {threads}",
        ),
        ("run -m {model}", "llama-perplexity", "has no {corpus}"),
        ("bench --modelFile={model} {corpus}", "mslite", "unknown placeholder {corpus}"),
    ],
)
def test_bad_templates(capsys, tmp_path, template, fmt, msg):
    code = main(
        ["check-runtime", "--command", template, "--format", fmt, "--out-dir", str(tmp_path)]
    )
    err = capsys.readouterr().err
    assert code == 2 and msg in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())  # checked before any work: nothing written


def test_runtime_failures_are_exit_2(capsys, gguf, tmp_path, cache):
    cases = [
        ("/no/such/llama-perplexity -f {corpus}", [], "could not start"),
        (f"{PY} {FAKE / 'garbage.py'} {{corpus}}", [], "expected 'Final estimate"),
        (f"{PY} {FAKE / 'crash.py'} {{corpus}}", [], "exited with code 3"),
        (
            f"{PY} {FAKE / 'hang.py'} {tmp_path / 'pid'} {{corpus}}",
            ["--timeout", "1"],
            "timed out after 1 s",
        ),
        (
            f"{PY} {FAKE / 'benchmark.py'} --format llama-perplexity && test -f {{corpus}}",
            [],
            "the runtime scored n_ctx=512 but the reference has n_ctx=64",
        ),
    ]
    for template, extra, msg in cases:
        code, out, err = check(capsys, gguf, tmp_path / "runs", *extra, commands=(template,))
        assert code == 2 and msg in err and "Traceback" not in err, (template, err)
    assert not (tmp_path / "runs").exists()  # nothing recorded from a failed run
    code, _, err = check(capsys, gguf, tmp_path, "--expect", "no-such-policy")
    assert code == 2 and "no-such-policy" in err
    code, _, err = check(capsys, tmp_path / "missing.gguf", tmp_path)
    assert code == 2 and "missing.gguf" in err
    assert main(["check-runtime", "--compare", str(tmp_path / "nope.json")]) == 2
    assert main(["check-runtime"]) == 2
    capsys.readouterr()


def test_compare_refuses_other_records(capsys, tmp_path):
    from harmony_ref.config import RunConfig
    from harmony_ref.metrics import Metrics
    from harmony_ref.track.record import Record, collect_provenance, write_record

    m = Metrics()
    m.add("ttft_ms", 1.0, "ms")
    p = write_record(Record(RunConfig.from_names().to_dict(), m, collect_provenance()), tmp_path)
    assert main(["check-runtime", "--compare", str(p)]) == 2
    assert "not a check-runtime record" in capsys.readouterr().err


def test_one_failing_command_is_an_error_row(capsys, gguf, tmp_path, cache):
    crash = f"{PY} {FAKE / 'crash.py'} {{corpus}}"
    code, out, err = check(
        capsys, gguf, tmp_path, "--label", "ok", "--label", "repack", commands=(PPL, crash)
    )
    assert code == 2 and "error: repack: command" in err and "exited with code 3" in err
    assert [(r["runtime"], r["verdict"]) for r in out["rows"]] == [
        ("ok", "accurate"),
        ("repack", "error (no result)"),
    ]
    assert out["errors"][0]["label"] == "repack" and len(out["runs"]) == 1
    assert len(list(tmp_path.glob("run-*.json"))) == 1  # only the run that ran is recorded


def test_corpus_file_is_what_both_sides_score(capsys, gguf, tmp_path, cache, monkeypatch):
    """--corpus FILE: the reference scores the user's text and the runtime's {corpus} is a copy
    of it (the fake scores whatever file it is given: a mismatch would show in the ratio)."""
    text = tmp_path / "mine.txt"
    text.write_text("a user's own text, with numbers 1234 and prompts. " * 60, encoding="utf-8")
    monkeypatch.setenv("FAKE_PPL_FACTOR", "1")
    code, own, err = check(capsys, gguf, tmp_path / "runs", "--corpus", str(text))
    assert code == 0, err
    code, shipped, err = check(capsys, gguf, tmp_path / "runs")
    assert code == 0, err
    assert own["reference"]["corpus_sha256"] != shipped["reference"]["corpus_sha256"]
    assert own["reference"]["ppl"] != shipped["reference"]["ppl"]
    ratio = own["runs"][0]["metrics"]["ppl_ratio_to_reference"]["value"]
    assert ratio == pytest.approx(1.0, abs=2e-4)


def test_expect_as_stored_on_an_exported_file(capsys, gguf, tmp_path, cache, monkeypatch):
    """An exported GGUF checked with --expect as-stored: the bound comes from harmony-ref's
    perplexity of the file as stored, and a runtime computing the file (the fake: FP32 on its
    dequantized weights) is within it."""
    from harmony_ref.checkpoint.gguf_export import export_gguf

    out = tmp_path / "q8.gguf"
    export_gguf(gguf, "q8_0", out)
    monkeypatch.setenv("FAKE_PPL_FACTOR", "1")
    code, r, err = check(capsys, out, tmp_path / "runs", "--expect", "as-stored")
    assert code == 0, err
    ref = r["reference"]
    assert ref["expect"] == "as-stored" and ref["expected_ratio"] == pytest.approx(1, abs=0.05)
    assert r["runs"][0]["verdict"] == "accurate"
    monkeypatch.setenv("FAKE_PPL_FACTOR", "3")
    code, r, err = check(capsys, out, tmp_path / "runs", "--expect", "as-stored")
    assert code == 1 and r["runs"][0]["verdict"] == "inaccurate"


# --- an ExecuTorch program harmony-ref runs itself (job/runtime_check_program.py) -------------
# These take the session's tiny programs (tests/conftest.py `tiny_programs`): skipped without the
# executorch extra, failed instead under HARMONY_REF_EXECUTORCH_TESTS=required (.ci/run).

PTE_CHUNKS = 4


def check_pte(capsys, program, out_dir, *extra):
    argv = ["check-runtime", "--model", str(program), "--context", "32"]
    argv += ["--chunks", str(PTE_CHUNKS), "--out-dir", str(out_dir), "--json", *extra]
    code = main(argv)
    cap = capsys.readouterr()
    return code, (json.loads(cap.out) if cap.out.strip() else None), cap.err


@pytest.mark.parametrize("arch,policy", [("gemma3", "fp32"), ("llama", "w4a8-g32")])
def test_pte_program_is_judged_beside_our_kernels(
    capsys, tiny_programs, tmp_path, cache, arch, policy
):
    """The program's perplexity against the FP32 reference of the checkpoint its manifest names,
    the bound derived from our kernels under the program's own policy; the fp32 program is the
    reference's math (ratio 1, no divergence); the record reads back as the same row."""
    out = tmp_path / "runs"
    program = tiny_programs.path(arch, policy)
    code, r, err = check_pte(capsys, program, out)
    (run,) = r["runs"]
    ref, m = r["reference"], run["metrics"]
    assert ref["expect"] == policy and ref["context"] == 32 and ref["chunks"] == PTE_CHUNKS
    assert ref["bound_high"] == pytest.approx(1 + max(2 * (ref["expected_ratio"] - 1), 0.01))
    ratio = m["ppl_ratio_to_reference"]["value"]
    assert ratio == pytest.approx(m["perplexity"]["value"] / ref["ppl"])
    within = 1 / ref["bound_high"] <= ratio <= ref["bound_high"]
    assert (code, run["verdict"]) == ((0, "accurate") if within else (1, "inaccurate")), err
    assert m["ppl_ratio_to_expected"]["value"] == pytest.approx(
        m["perplexity"]["value"] / (ref["ppl"] * ref["expected_ratio"])
    )
    tps = m["prefill_tokens_per_s"]
    assert tps["kind"] == "measured" and len(tps["samples"]) == PTE_CHUNKS
    assert run["label"] == f"executorch {policy}" and run["provenance"]["program_policy"] == policy
    if policy == "fp32":
        assert within and ratio == pytest.approx(1.0, abs=1e-4)
        assert m["kld_mean"]["value"] < 1e-6 and m["same_top_p_pct"]["value"] == 100.0
    rec = load_record(run["record"])
    assert rec.config["backend"] == "executorch"
    assert rec.config["backend_options"]["program"] == str(program)
    assert main(["check-runtime", "--compare", run["record"], "--json"]) == code
    assert json.loads(capsys.readouterr().out)["rows"] == r["rows"]


def test_pte_program_of_another_model_is_inaccurate(capsys, tiny_programs, tmp_path, cache):
    """A program that does not compute the model it names (its manifest pointed at another
    checkpoint of the same shape: a program built from the wrong weights) is flagged, exit 1,
    its speed not a result."""
    src = tiny_programs.path("llama", "int8")
    other = tmp_path / "other.gguf"
    write_tiny_gguf(other, tiny_config("llama"), seed=1)
    pte = tmp_path / "m.pte"
    shutil.copy(src, pte)
    manifest = json.loads(Path(f"{src}.manifest.json").read_text())
    manifest |= {"model": str(other), "source_sha256": sha256_file(other)}
    Path(f"{pte}.manifest.json").write_text(json.dumps(manifest))
    code, r, err = check_pte(capsys, pte, tmp_path / "runs")
    assert code == 1, err
    (run,) = r["runs"]
    assert run["verdict"] == "inaccurate" and "FP32 reference" in run["reasons"][0]
    assert "inaccurate" in run["metrics"]["prefill_tokens_per_s"]["flags"]
    assert r["rows"][0]["speed"].startswith("not a result")


@pytest.mark.parametrize(
    "extra,match",
    [
        (["--command", PPL], "check-runtime runs a .pte itself; give it no --command"),
        (["--parser", "mslite"], "give it no --parser mslite"),
        (["--label", "a", "--label", "b"], "--label given 2 times for one .pte"),
        (["--context", "64"], "--context 64: longer than"),
        (["--chunks", "999"], "--chunks 999"),
        (["--expect", "nope"], "nope"),
    ],
)
def test_pte_bad_input_is_one_line(capsys, tiny_programs, tmp_path, cache, extra, match):
    argv = ["check-runtime", "--model", str(tiny_programs.path("llama", "int8"))]
    argv += ["--context", "32", "--out-dir", str(tmp_path / "runs"), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and "\n" not in err and len(err) < 200, err
    assert not list((tmp_path / "runs").glob("*.json"))
