"""CommandDevice end to end with the fake devices in tests/fake_device (run with sys.executable):
real-format output parsed with provenance; a hang, a crash and garbage each a clear error with
nothing returned; placeholders filled and quoted; `harmony-ref measure`."""

import json
import shlex
import sys
import time
from pathlib import Path

import pytest

from harmony_ref.backends.base import Backend
from harmony_ref.backends.command import CommandDevice, fill_template, needs_shell
from harmony_ref.cli import main
from harmony_ref.lab.errors import BackendError
from tests.fake_device.fakephone import process_alive

FAKE = Path(__file__).parents[1] / "fake_device"
PY = shlex.quote(sys.executable)


def fake(script, *args):
    return " ".join([PY, shlex.quote(str(FAKE / script)), *args])


@pytest.mark.parametrize(
    "fmt,metric",
    [
        ("mslite", "e2e_ms"),
        ("tflite", "inference_avg_ms"),
        ("llama-bench", "decode_tokens_per_s"),
        ("executorch", "ttft_ms"),
    ],
)
def test_real_format_end_to_end(fmt, metric):
    dev = CommandDevice(
        fake(
            "benchmark.py",
            "--format",
            fmt,
            "--device-model",
            "'ALN-AL00'",
            "--os-build",
            "HarmonyOS-5.0.1.120",
        ),
        fmt,
        timeout_s=30,
    )
    assert isinstance(dev, Backend)
    m = dev.run()
    assert m.metrics.value(metric) > 0
    assert m.provenance["device_model"] == "ALN-AL00"
    assert m.provenance["os_build"] == "HarmonyOS-5.0.1.120"
    assert m.provenance["format"] == fmt
    assert dev.run(None).metrics.names() == m.metrics.names()
    # no phone profile given: only the loosest bound (any shipped phone, smallest model) applies
    assert m.physics.startswith("checked against every shipped profile") and m.findings == ()


def test_llama_bench_provenance_from_json():
    m = CommandDevice(fake("benchmark.py", "--format", "llama-bench"), "llama-bench", 30).run()
    assert m.provenance["cpu_info"] == "Qualcomm Kryo (ARMv9) 8 cores"
    assert m.provenance["model_type"] == "llama 1B Q4_0"


def test_hang_times_out_and_kills_children(tmp_path):
    pidfile = tmp_path / "child.pid"
    dev = CommandDevice(fake("hang.py", shlex.quote(str(pidfile))), "mslite", timeout_s=1.5)
    t0 = time.monotonic()
    with pytest.raises(BackendError, match=r"timed out after 1.5 s; its process group was killed"):
        dev.run(None)
    assert time.monotonic() - t0 < 10
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while process_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_alive(child), f"child {child} of the hung command survived the timeout"
    assert not hasattr(dev, "last_provenance")


def test_nonzero_exit_reports_stderr_tail():
    dev = CommandDevice(fake("crash.py"), "mslite", 30)
    with pytest.raises(BackendError, match=r"exited with code 3(.|\n)*device disconnected"):
        dev.run(None)


def test_garbage_is_a_parse_error():
    dev = CommandDevice(fake("garbage.py"), "mslite", 30)
    with pytest.raises(BackendError, match="expected a line 'Model = <name>"):
        dev.run(None)


def test_missing_binary():
    with pytest.raises(BackendError, match="could not start"):
        CommandDevice("/nonexistent/benchmark --x", "mslite", 5).run(None)


def test_shell_template_and_placeholders():
    tpl = fake("benchmark.py", "--format", "{fmt}") + " | cat && echo os_build={build}"
    assert needs_shell(tpl)
    dev = CommandDevice(tpl, "executorch", 30, values={"fmt": "executorch", "build": "5.0 (beta)"})
    m = dev.run()
    assert m.provenance["shell"] == "true"
    assert (
        m.provenance["os_build"] == "5.0 (beta)"
    )  # quoted, so the parentheses reached echo intact
    assert m.metrics.value("generated_tokens") == 96


def test_placeholder_values_are_quoted_and_missing_ones_named():
    assert fill_template("run {model}", {"model": "a b; rm -rf /"}) == "run 'a b; rm -rf /'"
    with pytest.raises(ValueError, match=r"\{threads\}"):
        fill_template("run {model} -t {threads}", {"model": "x"})
    assert not needs_shell("hdc shell /data/local/tmp/benchmark --modelFile=/x.ms")


def test_bad_arguments():
    with pytest.raises(ValueError, match="format 'onnx'"):
        CommandDevice("x", "onnx")
    with pytest.raises(ValueError, match="timeout_s"):
        CommandDevice("x", "mslite", timeout_s=0)


def test_cli_measure_json(capsys):
    rc = main(
        [
            "measure",
            "--command",
            fake("benchmark.py", "--format", "tflite", "--device-model", "P60"),
            "--format",
            "tflite",
            "--timeout",
            "30",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["metrics"]["inference_avg_ms"]["value"] == pytest.approx(42.2043)
    assert out["metrics"]["inference_avg_ms"]["kind"] == "measured"
    assert out["provenance"]["device_model"] == "P60"


@pytest.mark.parametrize(
    "script, timeout, says",
    [
        ("crash.py", "30", "exited with code 3"),
        ("garbage.py", "30", "expected a line 'Model = <name>"),
        ("hang.py", "1", "timed out after 1 s"),
    ],
)
def test_cli_measure_failure_is_clean(capsys, tmp_path, script, timeout, says):
    args = [shlex.quote(str(tmp_path / "child.pid"))] if script == "hang.py" else []
    rc = main(
        ["measure", "--command", fake(script, *args), "--format", "mslite", "--timeout", timeout]
    )
    captured = capsys.readouterr()
    assert rc == 1
    assert captured.err.startswith("harmony-ref measure: error: command") and says in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""  # nothing printed as a result


def test_cli_measure_table(capsys):
    assert (
        main(
            [
                "measure",
                "--command",
                fake("benchmark.py", "--format", "mslite"),
                "--format",
                "mslite",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "mslite_avg_run_ms" in out and "model_file: qwen2_0_5b_int4.ms" in out


def test_cli_measure_bad_template_names_the_subcommand(capsys):
    # --command once shared its dest with the CLI's subcommand name: errors read "harmony-ref echo {x}:"
    assert main(["measure", "--command", "echo {x}", "--format", "mslite"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("harmony-ref measure: error:") and "{x}" in err


def test_cli_measure_llama_perplexity(capsys):
    # measure --format llama-perplexity works like the other formats (the real recorded output)
    rc = main(
        [
            "measure",
            "--command",
            fake("benchmark.py", "--format", "llama-perplexity", "--device-model", "HOST"),
            "--format",
            "llama-perplexity",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["metrics"]["perplexity"]["value"] == pytest.approx(12.5579)
    assert out["metrics"]["perplexity"]["kind"] == "exact"
    assert out["metrics"]["prefill_tokens_per_s"]["kind"] == "measured"
    assert out["provenance"]["n_ctx"] == "512" and out["provenance"]["device_model"] == "HOST"
    rc = main(["measure", "--command", fake("garbage.py"), "--format", "llama-perplexity"])
    err = capsys.readouterr().err
    assert rc == 1 and "expected 'Final estimate: PPL" in err and "Traceback" not in err
