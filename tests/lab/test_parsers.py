"""Parsers on recorded outputs in the real formats (tests/fixtures/device_outputs), and on
garbage, truncated and failing outputs."""

import json
from pathlib import Path

import pytest

from harmony_ref.lab.parsers import ParseError, parse
from harmony_ref.units import MB, MIB

FIX = Path(__file__).parents[1] / "fixtures" / "device_outputs"
REL = 1e-9


def read(name):
    return (FIX / name).read_text()


def test_mslite_timings_and_bias():
    p = parse("mslite", read("mslite_benchmark.txt"))
    m = p.metrics
    assert m.value("e2e_ms") == pytest.approx(40.127998, rel=REL)
    assert m.value("mslite_min_run_ms") == pytest.approx(38.211998, rel=REL)
    assert m.value("mslite_max_run_ms") == pytest.approx(44.906998, rel=REL)
    assert m.value("mslite_prepare_ms") == pytest.approx(412.338, rel=REL)
    assert m.value("mslite_mean_bias_pct") == pytest.approx(0.231877, rel=REL)
    assert "mslite_cosine_distance" not in m
    assert all(x.kind == "measured" for x in m)
    assert p.provenance == {"model_file": "qwen2_0_5b_int4.ms", "num_threads": "4"}


def test_mslite_cosine():
    m = parse("mslite", read("mslite_cosine.txt")).metrics
    assert m.value("mslite_cosine_distance") == pytest.approx(0.998735189437866, rel=REL)
    assert m["mslite_cosine_distance"].direction == "higher"
    assert m.value("e2e_ms") == pytest.approx(3.687, rel=REL)


def test_mslite_line_variants_across_versions():
    # Checked in mindspore/lite/tools/benchmark: PrepareTime is streamed with `std::cout <<`, an
    # integer in versions dividing uint64 microseconds by 1000, a float (default 6 significant
    # digits, so possibly 1.23457e+06) in others; newer versions append " threshold is:<f>" to the
    # mean-bias line, and net_train prints "Exported model PrepareTime = ...".
    run = (
        "Model = m.ms, NumThreads = 2, MinRunTime = 1.000000 ms, MaxRuntime = 3.000000 ms, "
        "AvgRunTime = 2.000000 ms"
    )
    for prepare, want in (
        ("PrepareTime = 412 ms", 412.0),
        ("PrepareTime = 1.23457e+06 ms", 1.23457e6),
        ("Exported model PrepareTime = 96 ms", 96.0),
    ):
        m = parse(
            "mslite", f"{prepare}\nMean bias of all nodes/tensors: 0.5% threshold is:0.5\n{run}\n"
        ).metrics
        assert m.value("mslite_prepare_ms") == pytest.approx(want, rel=REL), prepare
        assert m.value("mslite_mean_bias_pct") == pytest.approx(0.5, rel=REL)
        assert m.value("e2e_ms") == pytest.approx(2.0, rel=REL)


def test_mslite_failure_quotes_the_tool():
    with pytest.raises(ParseError, match="Failed : -1"):
        parse("mslite", read("mslite_failed.txt"))


def test_tflite_timings_stats_memory():
    p = parse("tflite", read("tflite_benchmark_model.txt"))
    m = p.metrics
    assert m.value("inference_avg_ms") == pytest.approx(42.2043, rel=REL)
    assert m.value("e2e_ms") == m.value("inference_avg_ms")
    assert m.value("init_ms") == pytest.approx(1873.41, rel=REL)
    assert m.value("first_inference_ms") == pytest.approx(61.234, rel=REL)
    assert m.value("warmup_avg_ms") == pytest.approx(43.5619, rel=REL)
    assert p.provenance["model_file_size_mb"] == "554.312"  # printed as bytes / 1e6: MB, not MiB
    # the timed-run stat line (count=50), not the warm-up one (count=12)
    assert m.value("inference_runs") == 50
    assert m.value("inference_min_ms") == pytest.approx(40.891, rel=REL)
    assert m.value("inference_std_ms") == pytest.approx(1.187, rel=REL)
    # the tool's "MB" is KiB / 1024 (MiB); ours is 1e6 bytes
    assert m.value("peak_memory_mb") == pytest.approx(618.043 * MIB / MB, rel=REL)
    assert m.value("overall_memory_delta_mb") == pytest.approx(611.25 * MIB / MB, rel=REL)
    assert p.provenance["model_file"] == "/data/local/tmp/gemma3_1b_int4.tflite"
    assert p.provenance["num_threads"] == "4"


def test_tflite_failure():
    with pytest.raises(ParseError, match="Benchmarking failed.*GPU delegate"):
        parse("tflite", read("tflite_failed.txt"))


def test_tflite_without_memory_lines_still_parses():
    text = "INFO: Inference timings in us: Init: 3337, First inference: 81913, Warmup (avg): 58984.7, Inference (avg): 56265.8\n"
    m = parse("tflite", text).metrics
    assert m.value("e2e_ms") == pytest.approx(56.2658, rel=REL)
    assert "peak_memory_mb" not in m


def test_llama_bench_json():
    p = parse("llama-bench", read("llama_bench.json"))
    m = p.metrics
    assert m.value("prefill_ms") == pytest.approx(5693.245123, rel=REL)
    assert m.value("ttft_ms") == m.value("prefill_ms")
    assert m["prefill_ms"].samples == pytest.approx((5651.019874, 5688.39201, 5740.323485), rel=REL)
    assert m.value("decode_tokens_per_s") == pytest.approx(19.995328, rel=REL)
    assert m["decode_tokens_per_s"].samples == pytest.approx((20.2805, 20.0358, 19.6731), rel=REL)
    assert m.value("decode_step_ms") == pytest.approx(6402.117431 / 128, rel=REL)
    assert m.value("e2e_ms") == pytest.approx(5693.245123 + 6402.117431, rel=REL)
    assert p.provenance["cpu_info"] == "Qualcomm Kryo (ARMv9) 8 cores"
    assert p.provenance["model_type"] == "llama 1B Q4_0"
    assert p.provenance["tests"] == "pp512,tg128"


def test_llama_bench_decode_only_and_noise_before_json():
    rows = json.loads(read("llama_bench.json"))[1:]
    text = "load_backend: loaded CPU backend\n" + json.dumps(rows)
    m = parse("llama-bench", text).metrics
    assert "prefill_ms" not in m and "e2e_ms" not in m
    assert m.value("decode_tokens_per_s") == pytest.approx(19.995328, rel=REL)


def test_llama_bench_missing_fields():
    with pytest.raises(ParseError, match=r"lacks field\(s\) \['avg_ns'\]"):
        parse("llama-bench", '[{"n_prompt": 512, "n_gen": 0, "avg_ts": 90.0}]')


def test_executorch_observer_line():
    m = parse("executorch", read("executorch_llama_main.txt")).metrics
    assert m.value("ttft_ms") == 249
    assert m.value("prefill_ms") == 249
    assert m.value("e2e_ms") == 5259
    assert m.value("model_load_ms") == 1842
    # the same number stats.h prints in its own summary line
    assert m.value("decode_tokens_per_s") == pytest.approx(19.161677, rel=1e-6)
    assert m.value("generated_tokens") == 96


def test_executorch_scaling_factor_respected():
    s = {
        "prompt_tokens": 8,
        "generated_tokens": 10,
        "inference_start_ms": 0,
        "prompt_eval_end_ms": 500_000,
        "first_token_ms": 500_000,
        "inference_end_ms": 1_500_000,
        "SCALING_FACTOR_UNITS_PER_SECOND": 1_000_000,
    }
    m = parse("executorch", "PyTorchObserver " + json.dumps(s)).metrics
    assert m.value("ttft_ms") == 500
    assert m.value("decode_tokens_per_s") == 10


def test_executorch_timestamps_out_of_order():
    s = {
        "prompt_tokens": 8,
        "generated_tokens": 10,
        "inference_start_ms": 100,
        "prompt_eval_end_ms": 50,
        "first_token_ms": 50,
        "inference_end_ms": 200,
    }
    with pytest.raises(ParseError, match="out of order"):
        parse("executorch", "PyTorchObserver " + json.dumps(s))


GARBAGE = "Segmentation fault\n\x00\x01 random bytes 1234 ms\n"


@pytest.mark.parametrize(
    "fmt,expected",
    [
        ("mslite", "AvgRunTime"),
        ("tflite", "Inference timings in us"),
        ("llama-bench", "JSON array"),
        ("executorch", "PyTorchObserver"),
    ],
)
def test_garbage_names_what_was_expected(fmt, expected):
    with pytest.raises(ParseError, match=expected):
        parse(fmt, GARBAGE)


@pytest.mark.parametrize(
    "fmt,name",
    [
        ("mslite", "mslite_benchmark.txt"),
        ("tflite", "tflite_benchmark_model.txt"),
        ("llama-bench", "llama_bench.json"),
        ("executorch", "executorch_llama_main.txt"),
    ],
)
def test_truncated_output_is_an_error(fmt, name):
    text = read(name)
    with pytest.raises(ParseError):
        parse(fmt, text[: len(text) // 3])


def test_unknown_format():
    with pytest.raises(ValueError, match="unknown output format 'onnx'"):
        parse("onnx", "")


def test_harmony_ref_generate_json():
    """`harmony-ref generate --json`, as this repository's generate printed it (the fixture is a
    real run's output): phase times derived from its rates, its peak RSS (MiB) as MB."""
    text = (FIX / "harmony_ref_generate.json").read_text()
    g = json.loads(text)
    m = parse("harmony-ref-generate", "device_model=host\n" + text).metrics
    assert m.value("ttft_ms") == g["ttft_ms"]
    assert m.value("decode_step_ms") == pytest.approx(1e3 / g["decode_tokens_per_s"])
    assert m.value("prefill_ms") == pytest.approx(
        g["prompt_tokens"] / g["prefill_tokens_per_s"] * 1e3
    )
    assert m.value("e2e_ms") == pytest.approx(
        g["ttft_ms"] + g["decode_steps"] / g["decode_tokens_per_s"] * 1e3
    )
    assert m.value("peak_memory_mb") == pytest.approx(g["peak_rss_mb"] * MIB / MB)
    assert m["ttft_ms"].kind == "measured"
    with pytest.raises(ParseError, match="lacks field"):
        parse("harmony-ref-generate", '{"prompt_tokens": 3}')
    with pytest.raises(ParseError, match="expected the JSON object"):
        parse("harmony-ref-generate", "no json here")


@pytest.mark.parametrize(
    "fmt,fixture,ran",
    [
        ("llama-bench", "llama_bench.json", {"prompt_tokens": 512, "new_tokens": 128}),
        ("executorch", "executorch_llama_main.txt", {"prompt_tokens": 27, "new_tokens": 96}),
        ("harmony-ref-generate", "harmony_ref_generate.json", None),
    ],
)
def test_parsers_say_which_token_counts_ran(fmt, fixture, ran):
    p = parse(fmt, read(fixture))
    if ran is None:  # the generate fixture's own counts
        g = json.loads(read(fixture))
        ran = {"prompt_tokens": g["prompt_tokens"], "new_tokens": g["new_tokens"]}
    assert p.ran == ran
