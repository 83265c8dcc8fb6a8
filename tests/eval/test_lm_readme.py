"""The LM accuracy tables (docs/explanations/decoders.md, moved there from the README) are the
tool's output: their rows equal `markdown_rows` (what
`harmony-ref accuracy --markdown` prints) of the committed `harmony-ref accuracy --json` outputs
it was pasted from, the corpus size, context and scored tokens stated beside it match them, and
those outputs are on the shipped held-out corpus, named model, stated reference. The numbers are
float kernels' and BLAS's, repeatable on one machine, and re-measured on every `harmony-ref run`
(the first 2 chunks, gated against results/baseline.json)."""

import json
from pathlib import Path

from harmony_ref.eval.lm import CORPUS_SHA256
from harmony_ref.eval.lm_accuracy import REFERENCE_NOTE, markdown_rows

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "decoder"
PAGE = ROOT / "docs" / "explanations" / "decoders.md"  # where the tables live


def readme_rows(marker: str = "lm accuracy table") -> list[str]:
    text = PAGE.read_text()
    block = text.split(f"<!-- {marker} -->")[1].split(f"<!-- /{marker} -->")[0]
    return [
        line
        for line in block.splitlines()
        if line.startswith("| ") and "---" not in line and not line.startswith("| policy |")
    ]


def outputs():
    return [
        json.loads((FIXTURES / f"lm_accuracy_{n}.json").read_text()) for n in ("kv_fp16", "kv_int8")
    ]


def test_readme_table_is_the_tools_output():
    fp16, int8 = outputs()
    assert readme_rows() == markdown_rows(fp16) + markdown_rows(int8, skip_reference=True)
    assert fp16["rows"][0] == int8["rows"][0]  # one reference, cached between the two runs


def test_outputs_name_model_corpus_reference_and_sizes():
    text = PAGE.read_text()
    for d in outputs():
        assert d["model"] == "smollm2-135m" and d["reference"] == REFERENCE_NOTE
        assert d["corpus_sha256"] == CORPUS_SHA256["heldout"] and d["context"] == 512
        assert d["chunks"] == d["chunks_in_text"]  # the whole corpus
        for fact in (
            f"{d['tokens']:,} SmolLM2 tokens",
            f"{d['chunks']} chunks of context 512",
            f"{d['scored_tokens']:,} scored tokens",
        ):
            assert fact in text, fact


def test_gemma3_table_is_the_tools_output():
    """Gemma 3 270M's table: `harmony-ref accuracy --model gemma3-270m --json` committed, its
    rows the page's, on the shipped held-out corpus against the file's own dequantized
    weights."""
    d = json.loads((FIXTURES / "lm_accuracy_gemma3.json").read_text())
    assert readme_rows("gemma3 accuracy table") == markdown_rows(d)
    assert d["model"] == "gemma3-270m" and d["reference"] == REFERENCE_NOTE
    assert d["corpus_sha256"] == CORPUS_SHA256["heldout"] and d["context"] == 512
    text = PAGE.read_text()
    for fact in (
        f"{d['tokens']:,} Gemma 3 tokens",
        f"{d['chunks']} chunks of context 512",
        f"{d['scored_tokens']:,} scored tokens",
    ):
        assert fact in text, fact


def test_gemma3_decode_speed_sentence_is_the_benchmarks_output():
    """The page's Gemma 3 decode figures are tools/decoder_vs_llamacpp.py's --json (a timing:
    measured once under quiet, never asserted against a threshold; only the copy is checked)."""
    d = json.loads((FIXTURES / "decoder_vs_llamacpp_gemma3.json").read_text())
    text = " ".join(PAGE.read_text().split())
    assert d["model"] == "gemma3-270m" and d["threads"] == 2 and d["tokens"] == 64
    ours = d["ours"]
    for fact in (
        f"tg64 on the Q4_K_M file {d['llama_cpp_median']:.1f} tokens/s",
        f"ours int8 {ours['int8']['median']:.1f} ({ours['int8']['ratio_to_llama_cpp']:.2f}x)",
        f"int4-g32 {ours['int4-g32']['median']:.1f} "
        f"({ours['int4-g32']['ratio_to_llama_cpp']:.2f}x)",
    ):
        assert fact in text, fact


def test_gemma3_generation_samples_are_the_commands_output():
    """The page's Gemma 3 samples are `harmony-ref generate --json` completions, committed
    (greedy text is shown, never asserted against a fresh run)."""
    samples = json.loads((FIXTURES / "generate_gemma3.json").read_text())
    text = PAGE.read_text()
    for d in samples:
        assert d["model"].startswith("gemma3-270m") and d["sampling"] == "greedy"
        cell = d["completion"].replace("\n", "\\n").replace("|", "\\|")
        assert f"| {cell} |" in text, (d["policy"], d["prompt"])


def test_gemma3_plan_sentence_is_the_planners_output():
    """The page's plan at the Q4_K_M file's size is `harmony-ref plan --json`'s committed output,
    its policy the TOML beside it, scored on the held-out split."""
    d = json.loads((ROOT / "results" / "gemma3-plan" / "plan-246.4mb.json").read_text())
    toml = (ROOT / "results" / "gemma3-plan" / "plan-246.4mb.toml").read_text()
    assert d["policy_toml"] == toml and d["model"] == "gemma3-270m" and d["budget_mb"] == 246.4
    assert d["linear_weights_mb"] <= d["budget_mb"] and "12 chunks" in d["heldout"]
    text = " ".join(PAGE.read_text().split())
    f = d["formats_per_type"]
    assert f["lm_head"] == "int4-g32" and f["q_proj"] == f["gate_proj"] == f["up_proj"] == "int8"
    assert f["k_proj"] == f["v_proj"] == f["o_proj"] == f["down_proj"] == "fp16"
    for fact in (
        f"{d['linear_weights_mb']:.2f} MB of Linear weights",
        f"KLD mean {d['heldout_kld_mean']:.4f} (p99 {d['heldout_kld_p99']:.4f})",
        f"PPL x{d['heldout_ppl_ratio']:.4f}",
        f"top-1 {d['heldout_top1_agreement_pct']:.1f} %",
    ):
        assert fact in text, fact
