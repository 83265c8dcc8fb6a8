"""docs/export-gguf.md's llama.cpp figures are the committed outputs in results/export-gguf/
(check-runtime records, llama-bench session records, the gate's --json, the decode comparison's
--json, the greedy texts): each number the page prints is formatted from those files here, so the
page cannot drift from what was measured. Re-measuring is manual (a llama.cpp build is never part
of CI); the page names the build and the CPU."""

import json
from pathlib import Path

import pytest

from harmony_ref.track.record import load_record

ROOT = Path(__file__).parents[1]
RESULTS = ROOT / "results" / "export-gguf"
PAGE = (ROOT / "docs" / "export-gguf.md").read_text()
TEXT = " ".join(PAGE.split())  # line breaks inside sentences do not matter


def shown(*parts: str) -> bool:
    return " ".join(" ".join(parts).split()) in TEXT


@pytest.mark.parametrize("name", ["plan80", "q4_0", "q4_k_m"])
def test_runtime_check_row(name):
    m = load_record(RESULTS / f"check_runtime_{name}.json").metrics
    assert m.value("runtime_accurate") == 1.0
    row = " | ".join(
        f"{m.value(k):.4f}"
        for k in (
            "reference_perplexity",
            "expected_perplexity",
            "perplexity",
            "ppl_ratio_to_expected",
            "ppl_ratio_bound",
        )
    )
    assert shown(row + " | accurate |"), row
    # the two implementations agree far inside the bound check-runtime derives
    assert abs(m.value("ppl_ratio_to_expected") - 1) < m.value("ppl_ratio_bound") - 1


def test_llama_bench_session_and_gate():
    base = load_record(RESULTS / "llama_bench_baseline.json").metrics
    cur = load_record(RESULTS / "llama_bench_current.json").metrics
    assert shown(
        f"prefill {base.value('prefill_tokens_per_s'):.1f} tokens/s (TTFT "
        f"{base.value('ttft_ms'):.1f} ms for 64 tokens), decode "
        f"{base.value('decode_tokens_per_s'):.1f} tokens/s, peak memory "
        f"{base.value('device_peak_memory_mb'):.1f} MB"
    )
    gate = json.loads((RESULTS / "gate.json").read_text())
    c = gate["counts"]
    assert gate["verdict"] == "PASS" and gate["exit_code"] == 0
    assert shown(
        f"**{gate['verdict']}**, {c['pass']} pass and {c['info']} info of "
        f"{len(gate['metrics'])} metrics (decode {cur.value('decode_tokens_per_s'):.1f}"
    )
    change = next(r["change_pct"] for r in gate["metrics"] if r["metric"] == "decode_tokens_per_s")
    assert shown(f"{change:+.2f} %")


def test_decode_comparison():
    d = json.loads((RESULTS / "decode_vs_llamacpp.json").read_text())
    assert shown(f"llama.cpp {d['llama_cpp_median']:.1f} tokens/s")
    for policy, label in (
        ("as-stored", "as stored"),
        ("int4-g32", "int4-g32"),
        ("q4_0", "q4_0 everywhere"),
        ("q4_1", "q4_1 everywhere"),
    ):
        o = d["ours"][policy]
        assert shown(f"{label} {o['median']:.1f} ({o['ratio_to_llama_cpp']:.2f} x)"), policy
    assert "family 25, model 1" in d["cpu"] and shown("AMD EPYC family 25 model 1")


def test_greedy_texts_agree():
    g = json.loads((RESULTS / "greedy.json").read_text())
    ours = g["prompt"] + g["harmony_ref_completion"]
    assert ours.rstrip() == g["llama_simple_output"].rstrip()
    assert shown(" ".join(g["harmony_ref_completion"].split()))
