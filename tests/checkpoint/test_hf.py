"""The Hugging Face reader: round trip of tiny Llama / Qwen2 directories (single file, sharded
index, F16 and BF16 tensors), a GGUF model written out in HF layout giving the same logits
through both readers, and bad directories refused with the file and tensor or field named."""

import json

import numpy as np
import pytest

from harmony_ref.checkpoint.gguf import read_gguf
from harmony_ref.checkpoint.hf import read_hf_dir, write_hf_dir
from harmony_ref.model.decoder import CheckpointError
from harmony_ref.runtime.llama import Llama, LlamaRef
from tests.fixtures.decoder.tiny import tiny_config, tiny_weights, write_tiny_gguf, write_tiny_hf

TOKENS = [1, 40, 50, 260, 268, 35, 52, 53, 7, 2]
SAME_MODEL_LOGITS_ABS_TOL = 1e-5  # same FP32 weights, same code: summation order only


@pytest.mark.parametrize("arch,tied", [("llama", False), ("llama", True), ("qwen2", False)])
def test_round_trip(tmp_path, arch, tied):
    w = write_tiny_hf(tmp_path, tiny_config(arch, tied=tied))
    r = read_hf_dir(tmp_path)
    assert r.config.arch == arch and r.config.tied_embeddings == tied
    assert r.config.attention_bias == (arch == "qwen2")
    np.testing.assert_array_equal(r.layers[1].wk, w.layers[1].wk)
    np.testing.assert_array_equal(r.embed, w.embed)
    if arch == "qwen2":
        np.testing.assert_array_equal(r.layers[0].bv, w.layers[0].bv)


@pytest.mark.parametrize("arch", ["qwen3", "gemma3"])
def test_round_trip_qwen3_and_gemma3(tmp_path, arch):
    """Every tensor back (Gemma's norms stored as w - 1 and read as 1 + w), the config equal."""
    c = tiny_config(arch)
    w = write_tiny_hf(tmp_path, c)
    stored = {}
    from safetensors.numpy import load_file

    stored = load_file(str(tmp_path / "model.safetensors"))
    r = read_hf_dir(tmp_path)
    differ = {k for k in c.__dataclass_fields__ if getattr(r.config, k) != getattr(c, k)}
    assert differ <= {"chat_template", "name"}  # those come from tokenizer_config / the path
    for la, lb in zip(w.layers, r.layers):
        for key in ("q_norm", "k_norm", "post_attn_norm", "post_ffn_norm", "ffn_norm", "wq"):
            a, b = getattr(la, key), getattr(lb, key)
            assert (a is None) == (b is None), key
            if a is not None:
                np.testing.assert_allclose(a, b, atol=1e-6, rtol=0, err_msg=key)
    if arch == "gemma3":
        np.testing.assert_allclose(
            stored["model.layers.0.pre_feedforward_layernorm.weight"] + 1,
            w.layers[0].ffn_norm,
            atol=1e-6,
        )
        np.testing.assert_allclose(
            stored["model.layers.0.post_attention_layernorm.weight"] + 1,
            w.layers[0].post_attn_norm,
            atol=1e-6,
        )
    a = LlamaRef(w).prefill(TOKENS, all_logits=True)
    np.testing.assert_allclose(
        LlamaRef(r).prefill(TOKENS, all_logits=True), a, atol=SAME_MODEL_LOGITS_ABS_TOL * 10, rtol=0
    )


def test_gemma3_older_config_form_and_bad_fields(tmp_path):
    """transformers 4's keys (rope_theta + rope_local_base_freq, sliding_window_pattern) read
    like the newer rope_parameters + layer_types; unsupported fields named."""
    write_tiny_hf(tmp_path, tiny_config("gemma3"))
    path = tmp_path / "config.json"
    cfg = json.loads(path.read_text())
    old = {k: v for k, v in cfg.items() if k not in ("rope_parameters", "layer_types")}
    path.write_text(
        json.dumps(
            old | {"rope_theta": 1e6, "rope_local_base_freq": 1e4, "sliding_window_pattern": 3}
        )
    )
    c = read_hf_dir(tmp_path).config
    assert c.local_layers == (0, 1) and (c.rope_theta, c.rope_theta_local) == (1e6, 1e4)
    bad = [
        ({"final_logit_softcapping": 30.0}, "final_logit_softcapping"),
        ({"hidden_activation": "gelu"}, "'hidden_activation' = 'gelu'"),
        ({"layer_types": ["sliding_attention"]}, "'layer_types'"),
        ({"sliding_window": -1}, "'sliding_window' = -1"),
        (
            {
                "rope_parameters": {
                    "full_attention": {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0}
                }
            },
            "rope_type = 'linear'",
        ),
    ]
    for change, message in bad:
        path.write_text(json.dumps(cfg | change))
        with pytest.raises(CheckpointError, match=r"config\.json: .*" + message):
            read_hf_dir(tmp_path)


def test_sharded_index_f16_and_bf16(tmp_path):
    from safetensors.numpy import save_file

    w = tiny_weights()
    write_hf_dir(w, tmp_path / "one")
    tensors = {}
    from safetensors import safe_open

    with safe_open(str(tmp_path / "one" / "model.safetensors"), "numpy") as f:
        for k in f.keys():
            tensors[k] = f.get_tensor(k)
    d = tmp_path / "sharded"
    d.mkdir()
    (d / "config.json").write_text((tmp_path / "one" / "config.json").read_text())
    names = sorted(tensors)
    a, b = names[: len(names) // 2], names[len(names) // 2 :]
    save_file(
        {k: tensors[k].astype(np.float16) for k in a}, str(d / "model-00001-of-00002.safetensors")
    )
    # BF16 by hand: the upper 16 bits of float32 (truncation), stored as a BF16 tensor
    import struct

    header, blobs, off = {}, [], 0
    for k in b:
        raw = (tensors[k].astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
        header[k] = {
            "dtype": "BF16",
            "shape": list(tensors[k].shape),
            "data_offsets": [off, off + len(raw)],
        }
        blobs.append(raw)
        off += len(raw)
    hjson = json.dumps(header).encode()
    hjson += b" " * (-len(hjson) % 8)
    (d / "model-00002-of-00002.safetensors").write_bytes(
        struct.pack("<Q", len(hjson)) + hjson + b"".join(blobs)
    )
    index = {
        "weight_map": {k: "model-00001-of-00002.safetensors" for k in a}
        | {k: "model-00002-of-00002.safetensors" for k in b}
    }
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    r = read_hf_dir(d)
    name_of = {
        "model.embed_tokens.weight": r.embed,
        "model.layers.1.mlp.down_proj.weight": r.layers[1].w_down,
        "model.layers.0.self_attn.q_proj.weight": r.layers[0].wq,
    }
    for k, got in name_of.items():
        if k in a:
            np.testing.assert_array_equal(got, tensors[k].astype(np.float16))
        else:
            bf = ((tensors[k].view(np.uint32) >> 16) << 16).view(np.float32)
            np.testing.assert_array_equal(got, bf)
    assert set(r.stored_formats.values()) == {"F16", "BF16"}


def test_gguf_and_its_hf_export_give_the_same_logits(tmp_path):
    write_tiny_gguf(tmp_path / "m.gguf", tiny_config("llama"), seed=7)
    from_gguf = read_gguf(tmp_path / "m.gguf")
    write_hf_dir(from_gguf, tmp_path / "hf")
    from_hf = read_hf_dir(tmp_path / "hf")
    a = LlamaRef(from_gguf).prefill(TOKENS, all_logits=True)
    b = LlamaRef(from_hf).prefill(TOKENS, all_logits=True)
    np.testing.assert_allclose(a, b, atol=SAME_MODEL_LOGITS_ABS_TOL, rtol=0)
    fa = Llama(from_gguf, "int4-g32").prefill(TOKENS, all_logits=True)
    fb = Llama(from_hf, "int4-g32").prefill(TOKENS, all_logits=True)
    np.testing.assert_allclose(fa, fb, atol=SAME_MODEL_LOGITS_ABS_TOL, rtol=0)


def test_bad_directories(tmp_path):
    with pytest.raises(CheckpointError, match="no config.json"):
        read_hf_dir(tmp_path)
    write_tiny_hf(tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(
        json.dumps(cfg | {"architectures": ["GPT2LMHeadModel"]})
    )
    with pytest.raises(CheckpointError, match=r"config\.json: field 'architectures'"):
        read_hf_dir(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(
        json.dumps(cfg | {"rope_scaling": {"type": "yarn"}})
    )
    with pytest.raises(CheckpointError, match="rope_scaling"):
        read_hf_dir(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg | {"intermediate_size": 97}))
    with pytest.raises(
        CheckpointError,
        match=r"tensor model\.layers\.0\.mlp\.gate_proj\.weight: "
        r"shape \(96, 64\) does not match",
    ):
        read_hf_dir(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg | {"num_hidden_layers": 3}))
    with pytest.raises(
        CheckpointError,
        match=r"tensor model\.layers\.2\.input_layernorm\.weight "
        r"is missing",
    ):
        read_hf_dir(tmp_path / "m")


def test_nan_weight_named(tmp_path):
    w = tiny_weights()
    w.layers[1].wo[0, 3] = np.nan
    write_hf_dir(w, tmp_path)
    with pytest.raises(
        CheckpointError,
        match=r"tensor model\.layers\.1\.self_attn\.o_proj\.weight"
        r": value nan at \[0, 3\]",
    ):
        read_hf_dir(tmp_path)
