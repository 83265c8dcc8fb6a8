"""Accuracy parsers on recorded real-format outputs: llama-perplexity as the real binary printed it
on SmolLM2-135M (tests/fixtures/device_outputs/README.md says how the files were made), with and
without --kl-divergence, and MindSpore Lite benchmark's comparison lines (written from the tool's
format strings); plus truncated, mixed and failing outputs."""

from pathlib import Path

import pytest

from harmony_ref.lab.parsers import ParseError, mslite_accuracy, parse

FIX = Path(__file__).parents[1] / "fixtures" / "device_outputs"
REL = 1e-9


def read(name):
    return (FIX / name).read_text()


def test_llama_perplexity_real_output():
    p = parse("llama-perplexity", read("llama_perplexity.txt"))
    m = p.metrics
    assert m.value("perplexity") == pytest.approx(12.5579, rel=REL)
    assert m["perplexity"].kind == "exact" and m["perplexity"].direction == "lower"
    assert m.value("perplexity_uncertainty") == pytest.approx(0.60143, rel=REL)
    assert m.value("perplexity_chunks") == 12
    # the first pass (n_seq = 4 chunks of 512) took 148.18 s: 2048 tokens / 148.18 s
    assert m.value("ppl_first_pass_s") == pytest.approx(148.18, rel=REL)
    assert m.value("prefill_tokens_per_s") == pytest.approx(2048 / 148.18, rel=REL)
    assert m["prefill_tokens_per_s"].kind == "measured"
    assert p.provenance["n_ctx"] == "512" and p.provenance["n_chunks"] == "12"
    assert p.provenance["n_seq"] == "4" and p.provenance["mode"] == "perplexity"
    assert p.provenance["ppl_per_chunk"].split(",")[:2] == ["30.1159", "23.6153"]
    assert "AMX_INT8 = 1" in p.provenance["system_info"]


def test_llama_perplexity_kl_divergence_real_output():
    m = parse("llama-perplexity", read("llama_perplexity_kld.txt")).metrics
    want = {
        "perplexity": 12.575656,
        "perplexity_base": 12.547158,
        "ppl_ratio_to_base": 1.002271,
        "ln_ppl_ratio_to_base": 0.002269,
        "kld_mean": 0.003525,
        "kld_max": 0.061081,
        "kld_p99_9": 0.032402,
        "kld_p99": 0.017322,
        "kld_p95": 0.009885,
        "kld_p90": 0.007497,
        "kld_median": 0.002682,
        "kld_p10": 0.000201,
        "kld_p5": 0.000042,
        "kld_p1": 0.000002,
        "kld_p0_1": -0.000003,
        "kld_min": -0.000004,
        "rms_dp_pct": 1.505,
        "same_top_p_pct": 97.124,
        "perplexity_uncertainty": 0.602849,
        "kld_mean_uncertainty": 0.000069,
        "same_top_p_pct_uncertainty": 0.302,
        "ppl_first_pass_s": 70.58,
    }
    for name, value in want.items():
        assert m.value(name) == pytest.approx(value, rel=REL), name
    assert m["same_top_p_pct"].direction == "higher" and m["kld_mean"].direction == "lower"
    assert "perplexity_chunks" not in m  # the KLD mode prints a table, not the running list


def test_llama_perplexity_in_other_log_forms():
    # llama_perf's prompt-eval line (printed at a higher log level) is preferred for the speed;
    # an unprefixed log works as well as the real build's "0.06.879.404 I " prefix.
    text = (
        "perplexity: calculating perplexity over 2 chunks, n_ctx=128, batch_size=256, n_seq=2\n"
        "perplexity: 1.00 seconds per pass - ETA 0.02 minutes\n[1]10.0000,[2]8.5000,\n"
        "Final estimate: PPL = 8.5000 +/- 0.40000\n"
        "llama_perf_context_print: prompt eval time =     200.00 ms /   256 tokens (    0.78 ms"
        " per token,  1280.00 tokens per second)\n"
    )
    m = parse("llama-perplexity", text).metrics
    assert m.value("perplexity") == 8.5 and m.value("prefill_tokens_per_s") == 1280.0
    assert m.value("prompt_eval_ms") == 200.0


@pytest.mark.parametrize(
    "text,msg",
    [
        ("garbage 12.5 ms", "expected 'Final estimate"),
        ("[1]10.0,[2]9.0,", "expected 'Final estimate"),
        ("Final estimate: PPL = 9.0000 +/- 0.1\n", "no per-chunk estimates"),
        ("[1]10.0,[3]9.0,\nFinal estimate: PPL = 9.0000 +/- 0.1\n", "not numbered 1..2"),
        ("[1]10.0,[2]9.5,\nFinal estimate: PPL = 9.0000 +/- 0.1\n", "disagrees with the final"),
        (
            "perplexity: calculating perplexity over 3 chunks, n_ctx=8, batch_size=8, n_seq=1\n"
            "[1]10.0,[2]9.0,\nFinal estimate: PPL = 9.0000 +/- 0.1\n",
            "announced 3 chunks",
        ),
        ("[1]nan,\nFinal estimate: PPL = nan +/- nan\n", "expected a finite number"),
        (
            "perplexity: you need at least 1024 tokens to evaluate perplexity with a context of 512\n",
            "the tool reported an error",
        ),
        ("Mean PPL(Q)                   :  12.5 ±   0.6\n", "summary incomplete"),
    ],
)
def test_llama_perplexity_bad_output(text, msg):
    with pytest.raises(ParseError, match=msg):
        parse("llama-perplexity", text)


def test_llama_perplexity_truncated_real_output():
    text = read("llama_perplexity_kld.txt")
    with pytest.raises(ParseError, match="summary incomplete"):
        parse("llama-perplexity", text[: text.index("====== KL divergence")])


def test_mslite_accuracy_lines():
    a = mslite_accuracy(read("mslite_benchmark.txt"))
    assert a.mean_bias_pct == pytest.approx(0.231877, rel=REL) and a.cosine is None
    assert a.tensor_bias_pct == {"Default/network-Qwen2/logits": pytest.approx(0.231877)}
    assert a.printed_values["Default/network-Qwen2/logits"][:2] == [2.14053, -1.30421]
    assert a.failure is None
    c = mslite_accuracy(read("mslite_cosine.txt"))
    assert c.cosine == pytest.approx(0.998735189437866, rel=REL) and c.mean_bias_pct is None


def test_mslite_all_zeros_reads_as_perfect_cosine():
    # benchmark_base.h GetMeanError returns 1 when the output's sum of squares is < FLT_EPSILON:
    # the tool prints a perfect cosine for an all-zero output; the bias is exactly 100%.
    a = mslite_accuracy(read("mslite_zeros.txt"))
    assert a.cosine == 1.0 and a.mean_bias_pct == 100.0
    (values,) = a.printed_values.values()
    assert len(values) == 50 and set(values) == {0.0}
    assert a.tensor_cosine_pct == {"Default/network-Qwen2/logits": 100.0}
    m = parse("mslite", read("mslite_zeros.txt")).metrics  # the speed parser alone sees no fault
    assert m.value("mslite_cosine_distance") == 1.0


def test_mslite_accuracy_from_a_failed_run():
    text = read("mslite_not_the_model.txt")
    a = mslite_accuracy(text)
    assert a.mean_bias_pct == pytest.approx(847.213, rel=REL)
    assert a.failure == "Mean bias of all nodes/tensors is too big: 847.213%"
    with pytest.raises(ParseError, match="Failed : -1"):
        parse("mslite", text)
    low = mslite_accuracy(read("mslite_low_cosine.txt"))
    assert low.cosine == pytest.approx(0.314419984817505, rel=REL)
    assert low.tensor_cosine_pct == {"Default/network-Qwen2/logits": pytest.approx(31.442)}
