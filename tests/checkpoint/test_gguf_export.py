"""`export --format gguf` (checkpoint/gguf_export.py) on tiny decoders the tests write: for every
GGUF type, export -> read back through checkpoint/gguf.py == the policy's quantizer, bit for
bit (Q/K rows permuted and unpermuted on the way); the tiny model's logits through our runtime
from the file as stored == those of the in-memory policy; metadata copied and recorded; the
manifest; and bad exports refused in one line with nothing written."""

import json

import numpy as np
import pytest

from harmony_ref.checkpoint.gguf import gguf_metadata, read_gguf
from harmony_ref.checkpoint.gguf_export import export_gguf, verify_gguf_export
from harmony_ref.cli import main
from harmony_ref.kernels.formats import FORMATS
from harmony_ref.model.decoder import layer_name
from harmony_ref.quant.policy import load_policy, policy_from_dict
from harmony_ref.runtime.llama import Llama
from harmony_ref.runtime.loader import stored_policy
from tests.fixtures.decoder.tiny import TEMPLATE, tiny_config, write_tiny_gguf

SHORTS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
FIELDS = {
    "q_proj": "wq",
    "k_proj": "wk",
    "v_proj": "wv",
    "o_proj": "wo",
    "gate_proj": "w_gate",
    "up_proj": "w_up",
    "down_proj": "w_down",
}
MIXED = {
    "name": "gguf-mixed",
    "default": "q4_0",
    "keep_fp16_layers": ["lm_head"],
    "layers": {
        "q_proj": "q8_0",
        "k_proj": "q8_0",
        "*.mlp.up_proj": "q4_1",
        "model.layers.1.self_attn.o_proj": "f16",
    },
}
POLICIES = ["q4_0", "q4_1", "q8_0", "fp16", "fp32", "mixed-gguf"]


def _policy(name):
    return policy_from_dict(MIXED, "<mixed>") if name == "mixed-gguf" else load_policy(name)


@pytest.fixture(scope="module", params=["llama-untied", "llama-tied", "qwen2"])
def source(request, tmp_path_factory):
    arch, _, tie = request.param.partition("-")
    path = tmp_path_factory.mktemp("src") / f"{request.param}.gguf"
    w = write_tiny_gguf(path, tiny_config(arch, tied=tie == "tied"))
    return path, w


def _stored_bytes(m):
    return m.data if hasattr(m, "data") and hasattr(m, "qtype") else np.ascontiguousarray(m)


@pytest.mark.parametrize("policy_name", POLICIES)
def test_export_reads_back_as_the_quantizer_made_it(source, policy_name, tmp_path):
    src, w = source
    policy = _policy(policy_name)
    out = tmp_path / "out.gguf"
    r = export_gguf(src, policy, out)
    back = read_gguf(out, keep_stored=True)
    for i, lw in enumerate(w.layers):
        for short in SHORTS:
            name = layer_name(i, short)
            fmt = policy.format_for(name)
            want = FORMATS[fmt.kind].quantize(getattr(lw, FIELDS[short]))
            got = back.stored[name]
            assert np.array_equal(
                _stored_bytes(got).view(np.uint8), _stored_bytes(want).view(np.uint8)
            ), (policy_name, name)
    head_fmt = policy.format_for("lm_head")
    want = FORMATS[head_fmt.kind].quantize(w.head)
    assert np.array_equal(
        _stored_bytes(back.stored["lm_head"]).view(np.uint8), _stored_bytes(want).view(np.uint8)
    )
    for a, b in (
        (back.final_norm, w.final_norm),
        (back.layers[1].attn_norm, w.layers[1].attn_norm),
    ):
        assert np.array_equal(a, b)  # vectors stay F32
    if w.config.attention_bias:
        assert np.array_equal(back.layers[0].bq, w.layers[0].bq)
    assert back.config == w.config.__class__(**{**back.config.__dict__})  # a valid config
    assert (back.config.arch, back.config.n_layers, back.config.tied_embeddings) == (
        w.config.arch,
        w.config.n_layers,
        w.config.tied_embeddings,
    )
    meta = gguf_metadata(out)
    assert meta["tokenizer.chat_template"] == TEMPLATE
    assert meta["general.harmony_ref.policy"] == policy.name
    assert load_policy(_toml_file(tmp_path, meta["general.harmony_ref.policy_toml"])) == policy
    assert meta["general.quantized_by"].startswith("harmony-ref ")
    manifest = verify_gguf_export(out)
    assert manifest["file_sha256"] == r.file_sha256 and manifest["policy"] == policy.name
    assert set(manifest["tensor_sha256"]) == set(manifest["tensor_types"])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def _toml_file(d, text):
    p = d / "policy.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("policy_name", ["q4_0", "q4_1", "q8_0", "mixed-gguf"])
def test_as_stored_logits_equal_the_in_memory_policy(source, policy_name, tmp_path):
    src, w = source
    policy = _policy(policy_name)
    out = tmp_path / "out.gguf"
    export_gguf(src, policy, out)
    back = read_gguf(out, keep_stored=True)
    as_stored = stored_policy(back, str(out))
    assert Llama(back, as_stored).formats() == Llama(w, policy).formats()
    # the file's embedding table is lm_head's format (token_embd); the lookup reads those
    # values, as llama.cpp's get_rows does: the in-memory policy gets the same table
    from dataclasses import replace

    f = FORMATS[policy.format_for("lm_head").kind]
    embed = f.dequantize(f.quantize(w.embed))
    in_memory = replace(w, embed=embed, lm_head=w.lm_head)
    tokens = [1, 40, 7, 99, 3, 250, 12, 8, 64, 5]
    a = Llama(back, as_stored).prefill(tokens, all_logits=True)
    b = Llama(in_memory, policy).prefill(tokens, all_logits=True)
    assert np.array_equal(a, b), f"max |diff| {np.abs(a - b).max()}"


def _corpus(tmp_path):
    """A small UTF-8 text file of a few chunks of 32 tokens, to score."""
    text = tmp_path / "c.txt"
    text.write_text("the cat sat on the mat and then the dog ran in the sun. " * 10)
    return text


def test_as_stored_accuracy_is_the_policy_accuracy(source, tmp_path, monkeypatch):
    from dataclasses import replace

    from harmony_ref.eval.lm import evaluate_lm
    from harmony_ref.eval.lm_accuracy import Corpus, lm_accuracy
    from harmony_ref.runtime.tokenizer import Tokenizer

    monkeypatch.setenv("HARMONY_REF_NO_LM_CACHE", "1")
    src, w = source
    out = tmp_path / "out.gguf"
    export_gguf(src, "q4_1", out)
    text = _corpus(tmp_path)
    acc = lm_accuracy(str(out), [("as-stored", "fp16")], Corpus.from_file(text), context=32)
    f = FORMATS["q4_1"]
    in_memory = replace(w, embed=f.dequantize(f.quantize(w.embed)))
    ids = Tokenizer.from_gguf(out).encode(text.read_text())
    r = evaluate_lm(in_memory, ids, 32, [("q4_1", "fp16")], add_bos=False)
    assert acc.result["results"]["as-stored"]["ppl"] == r["results"]["q4_1"]["ppl"]


@pytest.mark.parametrize(
    "fmt, nearest", [("int4-g32", "q4_1"), ("int4-g32-sym", "q4_0"), ("int8", "q8_0")]
)
def test_a_format_without_a_gguf_type_is_refused_naming_tensor_and_nearest(
    source, fmt, nearest, tmp_path
):
    src, _ = source
    policy = policy_from_dict(
        {"name": "p", "default": "q4_0", "layers": {"model.layers.1.mlp.down_proj": fmt}}, "p.toml"
    )
    out = tmp_path / "out.gguf"
    with pytest.raises(
        ValueError,
        match=rf"blk\.1\.ffn_down\.weight .*{fmt}.*nearest GGUF "
        rf"type is {nearest}",
    ):
        export_gguf(src, policy, out)
    assert list(tmp_path.iterdir()) == []


def test_bad_exports_exit_2_with_nothing_written(source, tmp_path, capsys):
    from harmony_ref.checkpoint.gguf import write_gguf
    from tests.fixtures.decoder.tiny import tiny_weights

    src, _ = source
    bare = tmp_path / "bare.gguf"
    write_gguf(tiny_weights(), bare)  # no tokenizer metadata
    cases = [
        (["--model", str(src), "--policy", "int4-g32"], "nearest GGUF type"),
        (["--model", str(bare), "--policy", "q4_0"], "tokenizer"),
        (["--model", str(src), "--policy", "nope"], "nope"),
    ]
    for extra, needle in cases:
        out = tmp_path / "o" / "x.gguf"
        assert main(["export", "--format", "gguf", "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert not out.exists()
    assert (
        main(
            [
                "export",
                "--format",
                "gguf",
                "--model",
                str(src),
                "--policy",
                "q4_0",
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )  # a directory
    assert "is a directory" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) in (["bare.gguf"], ["bare.gguf", "o"])


def test_export_command_prints_and_writes_json(source, tmp_path, capsys):
    src, _ = source
    out = tmp_path / "x.gguf"
    assert (
        main(
            [
                "export",
                "--format",
                "gguf",
                "--model",
                str(src),
                "--policy",
                "q8_0",
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    info = json.loads(capsys.readouterr().out)
    assert info["tensor_types"]["Q8_0"] in (15, 16) and info["path"] == str(out)
    assert (tmp_path / "x.gguf.manifest.json").is_file()
    import os

    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # not the temporary file's 0600


def test_accuracy_as_stored_command(source, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HARMONY_REF_NO_LM_CACHE", "1")
    src, _ = source
    out = tmp_path / "x.gguf"
    export_gguf(src, "q4_0", out)
    text = _corpus(tmp_path)
    assert (
        main(
            [
                "accuracy",
                "--model",
                str(out),
                "--policy",
                "as-stored",
                "--policy",
                "q4_0",
                "--corpus",
                str(text),
                "--context",
                "32",
                "--json",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    rows = {r["policy"]: r for r in d["rows"]} if "rows" in d else None
    assert d and (rows is None or "as-stored" in rows)


def _tree(d):
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _export(src, out, *extra):
    argv = ["export", "--format", "gguf", "--model", str(src), "--policy", "q8_0"]
    return main([*argv, "--out", str(out), *extra])


def test_an_unwritable_manifest_is_refused_before_work_and_the_old_file_kept(
    source, tmp_path, capsys
):
    # Issue 45 item 1: out.gguf there, its manifest's path a directory: refused before any
    # work (the old file and the directory untouched), not deleted by a failed cleanup.
    src, _ = source
    out = tmp_path / "out.gguf"
    out.write_bytes(b"GGUF the user's previous file")
    (tmp_path / "out.gguf.manifest.json").mkdir()
    before = _tree(tmp_path)
    assert _export(src, out) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "out.gguf.manifest.json" in err, err
    assert "is a directory" in err and len(err) < 200
    assert _tree(tmp_path) == before and (tmp_path / "out.gguf.manifest.json").is_dir()


@pytest.mark.parametrize("fails", ["read back", "manifest move", "file move"])
def test_a_failed_export_leaves_the_previous_file_and_manifest_byte_for_byte(
    source, tmp_path, monkeypatch, fails
):
    import os

    from harmony_ref.checkpoint import gguf_export
    from harmony_ref.model.decoder import CheckpointError

    src, _ = source
    out = tmp_path / "out.gguf"
    assert _export(src, out) == 0  # a previous export and its manifest
    out.write_bytes(out.read_bytes() + b"and the user's own bytes")
    before = _tree(tmp_path)
    if fails == "read back":

        def bad_read_back(path, tensors):
            raise CheckpointError(f"{path}: tensor blk.0.attn_q.weight read back differently")

        monkeypatch.setattr(gguf_export, "_check_read_back", bad_read_back)
    else:
        name = "out.gguf.manifest.json" if fails == "manifest move" else "out.gguf"
        real = os.replace

        def replace(a, b, *args, **kw):
            if os.path.basename(b) == name and ".tmp-kept" not in os.path.basename(a):
                raise IsADirectoryError(21, "Is a directory", str(b))
            return real(a, b, *args, **kw)

        monkeypatch.setattr(os, "replace", replace)
    with pytest.raises((CheckpointError, OSError)):
        export_gguf(src, "q8_0", out)
    assert _tree(tmp_path) == before  # nothing lost, nothing half-written, no temporary left
