"""ExecuTorch programs of our decoders (runtime/torch_decoder.py, runtime/pte.py): the PyTorch
module computes what LlamaRef computes (every architecture of the tiny fixtures, and the real
SmolLM2-135M), the exported .pte computes what the module computes (fp32, and 8da4w / int8 as
ExecuTorch's flow quantizes them), and what no program can run is refused in one line.

Needs the `executorch` extra (torch CPU, executorch, torchao): skipped, with that reason, where it
is not installed (the default install); .ci/run installs it and sets
HARMONY_REF_EXECUTORCH_TESTS=required, so there they run. The programs are the session's shared
tiny exports (tests/conftest.py `tiny_programs`); the one real-model test (SmolLM2's eager module
against LlamaRef, no export) is marked slow."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.fixtures.executorch import PTE_CONTEXT, needs_extra

needs_extra(module_level=True)

import torch  # noqa: E402

from harmony_ref.runtime.llama import LlamaRef  # noqa: E402
from harmony_ref.runtime.loader import load_decoder  # noqa: E402
from harmony_ref.runtime.pte import PteProgram, export_pte, read_manifest  # noqa: E402
from harmony_ref.runtime.torch_decoder import (  # noqa: E402
    TorchDecoder,
    pte_plan,
    quantize_for_policy,
)
from tests.fixtures.decoder.tiny import tiny_config, write_tiny_gguf  # noqa: E402

# float32 in another order of operations (torch vs NumPy BLAS, XNNPACK's kernels): the largest
# logit difference, relative to the largest logit, within this
FP32_REL_TOL = 1e-5
# XNNPACK's int8 x int4 GEMM against torchao's reference ops of the same quantized weights:
# the same int8 activations except where a value lands on a rounding tie, so the logits agree
# to this relative difference, and every position's argmax but near-ties
QUANT_REL_TOL = 2e-2
TOKENS = np.arange(3, 23)  # 20 tokens: prefill, then one decode step at position 20


def _rel(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def _eager(module, tokens, start=0) -> np.ndarray:
    t = torch.as_tensor(np.asarray(tokens, dtype=np.int64))[None]
    pos = torch.arange(start, start + t.shape[1])
    with torch.no_grad():
        return module(t, pos)[0].numpy()


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "gemma3"])
def test_eager_module_equals_reference(arch, tmp_path):
    path = tmp_path / f"{arch}.gguf"
    write_tiny_gguf(path, tiny_config(arch))
    w, _ = load_decoder(str(path))
    ref = LlamaRef(w, max_context=PTE_CONTEXT)
    want = ref.prefill(TOKENS % w.config.vocab_size, all_logits=True)
    want_step = ref.decode(5)
    m = TorchDecoder(w, PTE_CONTEXT).eval()
    got = _eager(m, TOKENS % w.config.vocab_size)
    got_step = _eager(m, [5], start=len(TOKENS))[0]
    assert _rel(got, want) < FP32_REL_TOL, (arch, _rel(got, want))
    assert _rel(got_step, want_step) < FP32_REL_TOL, (arch, _rel(got_step, want_step))


@pytest.mark.slow
@pytest.mark.network
def test_eager_smollm2_equals_reference(smollm2):
    w, tok = smollm2
    ids = tok.encode("The capital of France is Paris. The capital of Italy is")
    want = LlamaRef(w, max_context=64).prefill(ids, all_logits=True)
    got = _eager(TorchDecoder(w, 64).eval(), ids)
    assert _rel(got, want) < FP32_REL_TOL
    assert (got.argmax(1) == want.argmax(1)).all()


@pytest.mark.parametrize(
    "arch,policy,tol",
    [("gemma3", "fp32", FP32_REL_TOL), ("llama", "w4a8-g32", QUANT_REL_TOL)]
    + [("llama", "int8", QUANT_REL_TOL)],
)
def test_program_equals_eager_module(tiny_programs, arch, policy, tol):
    r = tiny_programs.export(arch, policy)
    w, _ = load_decoder(str(tiny_programs.ggufs[arch]))
    m = TorchDecoder(w, PTE_CONTEXT).eval()
    plan = quantize_for_policy(m, policy)
    ids = TOKENS % w.config.vocab_size
    want, want_step = _eager(m, ids), _eager(m, [5], start=len(ids))[0]
    prog = PteProgram.load(r.path)
    got, got_step = prog.prefill(ids, all_logits=True), prog.decode(5)
    assert _rel(got, want) < tol, (policy, _rel(got, want))
    assert _rel(got_step, want_step) < tol
    # a second pass from position 0 reads no stale cache row
    prog.reset()
    assert _rel(prog.prefill(ids, all_logits=True), want) < tol
    m_ = read_manifest(r.path)
    assert m_["policy"] == policy and m_["max_context"] == PTE_CONTEXT
    assert {n: v["scheme"] for n, v in m_["linears"].items()} == {
        n: s for n, (s, _) in plan.items()
    }
    assert m_["file_sha256"] == r.file_sha256


@pytest.mark.parametrize("arch,policy", [("llama", "w4a8-g32"), ("gemma3", "fp32")])
def test_the_kv_caches_initial_zeros_are_stored_only_where_a_window_reads_them(
    tiny_programs, arch, policy
):
    """The program's mutable-buffer data (executorch's flatbuffer, deserialized): none for a
    causal program (custom_sdpa reads only rows written before it), the KV cache's zeros once
    per method for one with windowed layers (the tiny Gemma 3: a window of 4 in 32 positions),
    whose masked rows custom_sdpa still reads."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    r = tiny_programs.export(arch, policy)
    w, _ = load_decoder(str(tiny_programs.ggufs[arch]))
    c = w.config
    pte = deserialize_pte_binary(r.path.read_bytes())
    stored = sum(len(b.storage) for b in pte.mutable_data or [])
    kv_bytes = 2 * c.n_layers * PTE_CONTEXT * c.n_kv_heads * c.head_dim * 4  # k and v, fp32
    methods = len(pte.program.execution_plan)
    assert methods == 2
    assert stored == (methods * kv_bytes if arch == "gemma3" else 0)


def test_plan_follows_the_flow():
    c = tiny_config("llama")  # dim 64, ffn 96: K = 64 rows take g32; down_proj's K = 96 too
    plan = pte_plan(c, "w4a8-g32")
    assert plan["model.layers.0.self_attn.q_proj"] == ("8da4w", 32) and plan["lm_head"] == (
        "8da8w",
        0,
    )
    # group 128 divides no K of this model: the flow's filter leaves every such Linear FP32
    assert set(pte_plan(c, "w4a8-g128").values()) == {("fp32", 0)}
    assert set(pte_plan(c, "int8").values()) == {("int8", 0)}


@pytest.mark.parametrize(
    "policy,nearest",
    [("int4-g32", "w4a8-g32"), ("int4-g128", "w4a8-g128"), ("fp16", "fp32"), ("q8_0", "int8")],
)
def test_policy_without_counterpart_is_refused(policy, nearest):
    with pytest.raises(ValueError) as e:
        pte_plan(tiny_config("llama"), policy)
    msg = str(e.value)
    assert f"--policy {policy}" in msg and f"nearest policy that has one: {nearest}" in msg
    assert "\n" not in msg and len(msg) < 200


def test_bad_program_files_are_refused(tiny_programs, tmp_path):
    src = tiny_programs.path("llama", "w4a8-g32")
    pte = tmp_path / "m.pte"
    shutil.copy(src, pte)
    with pytest.raises(ValueError, match="no manifest m.pte.manifest.json beside it"):
        read_manifest(pte)
    manifest = json.loads((src.parent / (src.name + ".manifest.json")).read_text())
    (tmp_path / "m.pte.manifest.json").write_text(json.dumps(manifest))
    assert read_manifest(pte)["policy"] == "w4a8-g32"
    other = manifest | {"versions": manifest["versions"] | {"executorch": "0.7.0"}}
    (tmp_path / "m.pte.manifest.json").write_text(json.dumps(other))
    with pytest.raises(ValueError, match=r"built by ExecuTorch 0\.7\.0, this is .*export it"):
        read_manifest(pte)
    (tmp_path / "m.pte.manifest.json").write_text(json.dumps(manifest | {"format_version": 1}))
    with pytest.raises(ValueError, match="has format_version 1, this harmony-ref reads 2"):
        read_manifest(pte)
    with open(pte, "r+b") as f:  # one byte changed after export
        f.seek(1000)
        b = f.read(1)
        f.seek(1000)
        f.write(bytes([b[0] ^ 1]))
    (tmp_path / "m.pte.manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="SHA-256 is not its manifest's"):
        read_manifest(pte)
    junk = tmp_path / "junk.pte"
    junk.write_bytes(b"GGUF" * 100)
    with pytest.raises(ValueError, match="not an ExecuTorch program"):
        read_manifest(junk)
    older = tmp_path / "older.pte"  # the identifier of another program schema
    older.write_bytes(b"\x00" * 4 + b"ET11" + b"\x00" * 100)
    with pytest.raises(ValueError, match="program of schema ET11, this ExecuTorch reads ET12"):
        read_manifest(older)


def test_export_refuses_before_work(tmp_path):
    gguf = tmp_path / "llama.gguf"
    write_tiny_gguf(gguf, tiny_config("llama"))
    out = tmp_path / "out" / "x.pte"
    out.parent.mkdir()
    with pytest.raises(ValueError, match="--max-context 999: must be 1..128"):
        export_pte(str(gguf), "fp32", out, 999)
    with pytest.raises(ValueError, match="nearest policy that has one: w4a8-g32"):
        export_pte(str(gguf), "int4-g32", out, 16)
    assert list(out.parent.iterdir()) == []


@pytest.mark.parametrize(
    "policy,match",
    [
        ("q4_0", "--policy q4_0: model.layers.0.self_attn.q_proj in q4_0 has no ExecuTorch"),
        ("nope", "nope"),
    ],
)
def test_export_pte_policy_refusal_is_one_line(policy, match, tmp_path, capsys):
    from harmony_ref.cli import main

    gguf = tmp_path / "llama.gguf"
    write_tiny_gguf(gguf, tiny_config("llama"))
    argv = ["export", "--model", str(gguf), "--policy", policy, "--format", "pte"]
    assert main([*argv, "--out", str(tmp_path / "m.pte")]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and "\n" not in err and len(err) < 200, err
    assert not (tmp_path / "m.pte").exists()


def test_accuracy_scores_the_program_beside_our_kernels(tiny_programs, capsys):
    from harmony_ref.cli import main

    fp32 = tiny_programs.path("gemma3", "fp32")
    assert (
        main(["accuracy", "--model", str(fp32), "--context", "32", "--chunks", "2", "--json"]) == 0
    )
    rows = {
        r["policy"] + "/" + r["kv_cache"]: r for r in json.loads(capsys.readouterr().out)["rows"]
    }
    ref = rows["FP32 reference (NumPy)/fp32"]
    prog = rows["fp32/executorch-xnnpack"]
    assert "fp32/fp16" in rows  # our kernels under the program's policy, beside it
    # the fp32 program is the reference's math: same perplexity, no divergence, same argmax
    assert prog["ppl"] == pytest.approx(ref["ppl"], rel=1e-4)
    assert prog["kld_mean"] < 1e-6 and prog["top1_agreement_pct"] == 100.0
    q = tiny_programs.path("llama", "w4a8-g32")
    argv = ["accuracy", "--model", str(q), "--context", "64", "--json"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "--context 64: longer than" in err and "32 positions" in err and "\n" not in err
