"""The GGUF reader on tiny checkpoints the tests write with gguf's GGUFWriter: round trip of
every tensor (Q/K RoPE permutation undone), the spec from metadata, gguf's quantized types
dequantized, and bad files (truncated, unknown architecture, missing tensor, shape mismatch,
NaN weights) refused with the file and tensor named."""

import numpy as np
import pytest

from harmony_ref.checkpoint import gguf as g
from harmony_ref.model.decoder import CheckpointError
from tests.fixtures.decoder.tiny import tiny_config, tiny_weights, write_tiny_gguf


def _same_weights(a, b, tol=0.0):
    for name in ("embed", "final_norm"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), atol=tol, rtol=0)
    for la, lb in zip(a.layers, b.layers):
        for key in (
            "attn_norm",
            "wq",
            "wk",
            "wv",
            "wo",
            "ffn_norm",
            "w_gate",
            "w_up",
            "w_down",
            "bq",
            "bk",
            "bv",
            "q_norm",
            "k_norm",
            "post_attn_norm",
            "post_ffn_norm",
        ):
            x, y = getattr(la, key), getattr(lb, key)
            assert (x is None) == (y is None), key
            if x is not None:
                np.testing.assert_allclose(x, y, atol=tol, rtol=0, err_msg=key)


@pytest.mark.parametrize("arch,tied", [("llama", False), ("llama", True), ("qwen2", False)])
def test_round_trip_f32(tmp_path, arch, tied):
    w = write_tiny_gguf(tmp_path / "m.gguf", tiny_config(arch, tied=tied))
    r = g.read_gguf(tmp_path / "m.gguf")
    _same_weights(w, r)
    assert (r.lm_head is None) == tied
    c = r.config
    assert (c.arch, c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_dim) == (
        arch,
        2,
        64,
        4,
        2,
        16,
        96,
    )
    assert c.tied_embeddings == tied and c.attention_bias == (arch == "qwen2")
    assert (c.bos_id, c.eos_id, c.max_positions, c.rope_theta) == (1, 2, 128, 10000.0)
    assert c.norm_eps == pytest.approx(1e-5) and "im_start" in c.chat_template


@pytest.mark.parametrize("arch", ["qwen3", "gemma3"])
def test_round_trip_qwen3_and_gemma3(tmp_path, arch):
    """Every tensor back (q/k norms, post norms), the config equal to the one written: Gemma's
    sliding window, its local layers, both RoPE bases, the embedding and query scales."""
    c = tiny_config(arch)
    w = write_tiny_gguf(tmp_path / "m.gguf", c)
    r = g.read_gguf(tmp_path / "m.gguf")
    _same_weights(w, r)
    differ = {
        k: (getattr(r.config, k), getattr(c, k))
        for k in c.__dataclass_fields__
        if getattr(r.config, k) != getattr(c, k) and k not in ("norm_eps", "chat_template")
    }
    assert differ == {}
    assert r.config.norm_eps == pytest.approx(c.norm_eps)


def _gemma3_with(tmp_path, **keys):
    """The tiny Gemma 3 GGUF with metadata keys (gemma3.<key>) replaced."""
    import gguf

    src = tmp_path / "src.gguf"
    write_tiny_gguf(src, tiny_config("gemma3"))
    reader = gguf.GGUFReader(str(src))
    out = tmp_path / "bad.gguf"
    w = gguf.GGUFWriter(str(out), "gemma3")
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        short = name.removeprefix("gemma3.")
        if short in keys:
            continue
        w.add_key_value(
            name,
            field.contents(),
            field.types[0],
            field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None,
        )
    for short, value in keys.items():
        if isinstance(value, float):
            w.add_float32(f"gemma3.{short}", value)
        elif isinstance(value, list):
            w.add_array(f"gemma3.{short}", value)
        else:
            w.add_int32(f"gemma3.{short}", value)
    for t in reader.tensors:
        w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def test_gemma3_metadata_rules_and_bad_values(tmp_path):
    # an integer pattern, llama.cpp's rule: layer i local unless i % n == n - 1
    c = g.read_gguf_config(_gemma3_with(tmp_path, **{"attention.sliding_window_pattern": 2}))
    assert c.local_layers == (0, 2) and c.rope_theta_local == 1e4
    c = g.read_gguf_config(_gemma3_with(tmp_path, **{"attention.sliding_window": 0}))
    assert c.local_layers == () and c.sliding_window == 0  # no window: every layer global
    bad = [
        ({"attention.sliding_window": -3}, r"gemma3\.attention\.sliding_window = -3"),
        (
            {"attention.sliding_window_pattern": [True]},
            r"gemma3\.attention\.sliding_window_pattern = \[True\]",
        ),
        ({"final_logit_softcapping": 30.0}, r"gemma3\.final_logit_softcapping = 30\.0"),
        ({"rope.freq_base": float("nan")}, r"gemma3\.rope\.freq_base = nan"),
        ({"attention.head_count": 0}, r"gemma3\.attention\.head_count = 0"),
        ({"attention.value_length": 8}, r"gemma3\.attention\.value_length = 8"),
    ]
    for keys, message in bad:
        with pytest.raises(CheckpointError, match=r"bad\.gguf: .*" + message):
            g.read_gguf(_gemma3_with(tmp_path, **keys))


def test_bad_architecture_metadata_is_exit_2_naming_the_field(tmp_path, capsys):
    from harmony_ref.cli import main

    path = _gemma3_with(tmp_path, **{"attention.sliding_window": -3})
    assert main(["generate", "--model", str(path), "--prompt", "hi", "--max-new", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "gemma3.attention.sliding_window = -3" in err and len(err.splitlines()) == 1


def test_llama_qk_rows_are_permuted_in_the_file_and_unpermuted_on_load(tmp_path):
    import gguf

    w = write_tiny_gguf(tmp_path / "m.gguf")
    reader = gguf.GGUFReader(str(tmp_path / "m.gguf"))
    stored = {t.name: np.asarray(t.data) for t in reader.tensors}
    wq_file = stored["blk.0.attn_q.weight"].reshape(64, 64)
    assert not np.array_equal(wq_file, w.layers[0].wq)
    np.testing.assert_array_equal(g.unpermute_rope_rows(wq_file, 4), w.layers[0].wq)
    np.testing.assert_array_equal(g.permute_rope_rows(w.layers[0].wq, 4), wq_file)
    # within one head: file row 2j is HF row j, file row 2j+1 is HF row j + hd/2
    np.testing.assert_array_equal(wq_file[2], w.layers[0].wq[1])
    np.testing.assert_array_equal(wq_file[3], w.layers[0].wq[1 + 8])


def test_f16_file_reads_as_float16_rounded_weights(tmp_path):
    w = write_tiny_gguf(tmp_path / "m.gguf", qtype="F16")
    r = g.read_gguf(tmp_path / "m.gguf")
    np.testing.assert_array_equal(r.layers[0].w_up, w.layers[0].w_up.astype(np.float16))
    assert r.stored_formats["blk.0.ffn_up.weight"] == "F16"


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q4_1"])
def test_quantized_tensors_are_dequantized_by_gguf(tmp_path, qtype):
    import gguf

    w = tiny_weights()
    q = gguf.GGMLQuantizationType[qtype]
    out = tmp_path / "q.gguf"
    writer = gguf.GGUFWriter(str(out), "llama")
    a = w.layers[0].w_up
    writer.add_tensor("x", gguf.quants.quantize(a, q), raw_dtype=q)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    t = gguf.GGUFReader(str(out)).tensors[0]
    got = g._dequantize(t, out)
    assert got.shape == a.shape and got.dtype == np.float32
    step = np.abs(a).max() / {"Q8_0": 127, "Q4_0": 7, "Q4_1": 7}[qtype]
    assert np.abs(got - a).max() <= step  # within one quantization step of the original


def test_truncated_file_is_refused(tmp_path):
    write_tiny_gguf(tmp_path / "m.gguf")
    data = (tmp_path / "m.gguf").read_bytes()
    (tmp_path / "t.gguf").write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(CheckpointError, match=r"t\.gguf: not a readable GGUF file"):
        g.read_gguf(tmp_path / "t.gguf")
    (tmp_path / "h.gguf").write_bytes(data[:40])
    with pytest.raises(CheckpointError, match=r"h\.gguf"):
        g.read_gguf(tmp_path / "h.gguf")


def test_unknown_architecture(tmp_path):
    import gguf

    w = gguf.GGUFWriter(str(tmp_path / "a.gguf"), "mamba")
    w.add_tensor("token_embd.weight", np.zeros((4, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(CheckpointError, match=r"a\.gguf: general.architecture = 'mamba'"):
        g.read_gguf(tmp_path / "a.gguf")


def _rewrite(tmp_path, edit):
    """Write the tiny model with `edit(weights)` applied to the in-memory weights first."""
    w = tiny_weights()
    edit(w)
    g.write_gguf(w, tmp_path / "bad.gguf")
    return tmp_path / "bad.gguf"


def test_missing_tensor(tmp_path):
    path = tmp_path / "bad.gguf"
    w = tiny_weights()
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    c = w.config
    writer.add_block_count(c.n_layers)
    writer.add_embedding_length(c.dim)
    writer.add_feed_forward_length(c.ffn_dim)
    writer.add_head_count(c.n_heads)
    writer.add_layer_norm_rms_eps(c.norm_eps)
    writer.add_tensor("token_embd.weight", w.embed)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(
        CheckpointError,
        match=r"bad\.gguf: tensor blk\.0\.attn_norm\.weight is "
        r"missing",
    ):
        g.read_gguf(path)


def test_shape_mismatch(tmp_path):
    def edit(w):
        w.layers[1].w_down = w.layers[1].w_down[:, :64]

    with pytest.raises(
        CheckpointError,
        match=r"bad\.gguf: tensor blk\.1\.ffn_down\.weight: "
        r"shape \(64, 64\) does not match .*\(64, 96\)",
    ):
        g.read_gguf(_rewrite(tmp_path, edit))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_weights(tmp_path, bad):
    def edit(w):
        w.layers[0].w_gate[5, 7] = bad

    with pytest.raises(
        CheckpointError,
        match=r"bad\.gguf: tensor blk\.0\.ffn_gate\.weight: "
        r"value .* at \[5, 7\] is not finite",
    ):
        g.read_gguf(_rewrite(tmp_path, edit))


def test_missing_file():
    with pytest.raises(CheckpointError, match="no such GGUF file"):
        g.read_gguf("/nonexistent/x.gguf")
