"""Model specs: shapes from the published config.json files, parameter counts within 1% of the
totals the model cards publish, layer names that policy patterns match, and the spec files
validated like profiles (file, field and value named)."""

import dataclasses

import pytest

from harmony_ref.model.spec import ModelSpec, get_spec, list_specs
from harmony_ref.quant.policy import load_policy

PARAM_TOLERANCE = 0.01  # issue 4: spec totals within 1% of the published ones

# Published totals (model cards / safetensors metadata), restated here so the test does not
# just compare the table with itself.
PUBLISHED = {
    "qwen2.5-0.5b": 0.49e9,  # Qwen2.5-0.5B card: "Number of Parameters: 0.49B"
    "qwen2.5-1.5b": 1.54e9,  # Qwen2.5-1.5B card: "Number of Parameters: 1.54B"
    "qwen2.5-7b": 7.61e9,  # Qwen2.5-7B card: "Number of Parameters: 7.61B"
    "llama-3.2-1b": 1_235_814_400,  # Llama-3.2-1B safetensors total (card: 1.23B)
    "llama-3.2-3b": 3_212_749_824,  # Llama-3.2-3B safetensors total (card: 3.21B)
    "llama-2-7b": 6_738_415_616,  # Llama-2-7b-hf safetensors total
    "all-minilm-l6": 22.7e6,  # all-MiniLM-L6-v2 card: 22.7M params
    "gemma-2b": 2.51e9,  # google/gemma-2b model page: 2.51B params
    "qwen3-0.6b": 0.6e9,  # Qwen3-0.6B card: "Number of Parameters: 0.6B"
    "qwen3-4b": 4.0e9,  # Qwen3-4B card: "Number of Parameters: 4.0B"
    # Gemma 3 technical report (arXiv 2503.19786) Table 1, 4B: 675M embedding + 3,209M
    # non-embedding (its 417M vision encoder is not the language model)
    "gemma-3-4b": 3.884e9,
    "smollm2-135m": 135e6,  # SmolLM2-135M card: 135M
}
# Non-embedding totals, where a card's rounded total is coarser than 1% (Qwen3-1.7B: "1.7B")
PUBLISHED_NON_EMBEDDING = {
    "qwen3-1.7b": 1.4e9,  # Qwen3-1.7B card: non-embedding 1.4B
}


def test_every_required_preset_exists():
    assert set(PUBLISHED) <= set(list_specs())


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_param_count_matches_published_total(name):
    spec = get_spec(name)
    got, want = spec.param_count(), PUBLISHED[name]
    print(f"{name}: {got:,} parameters from the shapes vs {want:,.0f} published")
    assert abs(got / want - 1) < PARAM_TOLERANCE


@pytest.mark.parametrize("name", sorted(PUBLISHED_NON_EMBEDDING))
def test_non_embedding_count_matches_published(name):
    spec = get_spec(name)
    got = spec.param_count() - spec.embedding_params()
    assert abs(got / PUBLISHED_NON_EMBEDDING[name] - 1) < PARAM_TOLERANCE


def test_the_2025_presets_follow_their_configs():
    """Qwen3 (head_dim 128 beside a smaller hidden / heads, no q/k/v bias), Gemma 3 4B's
    text model (1,024-token window, every sixth layer global), as their config.json say."""
    shapes = {
        "qwen3-0.6b": (28, 1024, 16, 8, 128, 3072, 151936, 40960),
        "qwen3-1.7b": (28, 2048, 16, 8, 128, 6144, 151936, 40960),
        "qwen3-4b": (36, 2560, 32, 8, 128, 9728, 151936, 40960),
        "gemma-3-4b": (34, 2560, 8, 4, 256, 10240, 262208, 131072),
        "smollm2-135m": (30, 576, 9, 3, 64, 1536, 49152, 8192),
    }
    for name, want in shapes.items():
        s = get_spec(name)
        got = (s.n_layers, s.hidden, s.n_heads, s.n_kv_heads, s.head_dim, s.intermediate)
        assert got + (s.vocab, s.max_positions) == want, name
        assert s.tie_embeddings and not s.qkv_bias, name
    g = get_spec("gemma-3-4b")
    assert g.sliding_window == 1024 and g.activation == "gelu_tanh"
    assert [i for i in range(g.n_layers) if not g.is_local(i)] == [5, 11, 17, 23, 29]
    assert all(get_spec(n).rope_theta == 1e6 for n in ("qwen3-0.6b", "qwen3-4b", "gemma-3-4b"))


# What the cost model reads of a spec (model/graph.py builds the op graph from these).
COST_FIELDS = (
    "kind",
    "n_layers",
    "hidden",
    "n_heads",
    "n_kv_heads",
    "head_dim",
    "intermediate",
    "vocab",
    "max_positions",
    "tie_embeddings",
    "qkv_bias",
    "activation",
    "rope_theta",
    "rope_scaling",
    "sliding_window",
    "local_layers",
)


def test_smollm2_preset_is_the_shipped_checkpoint():
    """The preset `smollm2-135m` prices the model the shipped checkpoint of that name is: its
    fields equal what checkpoint_spec derives from the GGUF's own metadata."""
    from harmony_ref.checkpoint.assets import AssetUnavailable
    from harmony_ref.runtime.loader import checkpoint_spec

    try:
        derived = checkpoint_spec("smollm2-135m")
    except AssetUnavailable as e:
        pytest.skip(f"SmolLM2 checkpoint unavailable (package registry unreachable): {e}")
    preset = get_spec("smollm2-135m")
    for f in COST_FIELDS:
        assert getattr(preset, f) == getattr(derived, f), f
    assert preset.norm_eps == pytest.approx(derived.norm_eps, rel=1e-6)  # GGUF stores float32
    assert preset.linears() == derived.linears()
    assert preset.param_count() == derived.param_count()


def test_shapes_follow_the_published_configs():
    q05 = get_spec("qwen2.5-0.5b")
    assert (q05.n_layers, q05.hidden, q05.n_heads, q05.n_kv_heads, q05.head_dim) == (
        24,
        896,
        14,
        2,
        64,
    )
    assert q05.qkv_bias and q05.tie_embeddings and q05.intermediate == 4864 and q05.vocab == 151936
    q7 = get_spec("qwen2.5-7b")
    assert q7.qkv_bias and not q7.tie_embeddings and q7.vocab == 152064 and q7.kv_dim == 512
    l3 = get_spec("llama-3.2-3b")
    assert (l3.n_layers, l3.hidden, l3.n_heads, l3.n_kv_heads, l3.head_dim) == (
        28,
        3072,
        24,
        8,
        128,
    )
    assert l3.tie_embeddings and not l3.qkv_bias and l3.intermediate == 8192
    l1 = get_spec("llama-3.2-1b")
    assert (l1.n_layers, l1.hidden, l1.head_dim, l1.n_kv_heads) == (
        16,
        2048,
        64,
        8,
    ) and l1.tie_embeddings
    mini = get_spec("all-minilm-l6")
    assert (mini.kind, mini.n_layers, mini.hidden, mini.n_heads, mini.intermediate) == (
        "encoder",
        6,
        384,
        12,
        1536,
    )
    assert (mini.vocab, mini.max_positions, mini.type_vocab) == (30522, 512, 2)


def test_tied_lm_head_counted_once():
    spec = get_spec("llama-3.2-3b")
    untied = dataclasses.replace(spec, tie_embeddings=False)
    assert untied.param_count() - spec.param_count() == spec.vocab * spec.hidden


def test_layer_names_are_what_policies_match():
    spec = get_spec("llama-3.2-3b")
    names = [lin.name for lin in spec.layer_linears(3)]
    assert names[0] == "model.layers.3.self_attn.q_proj"
    assert "model.layers.3.mlp.gate_proj" in names
    assert spec.head_linear().name == "lm_head"
    mixed = load_policy("mixed")
    assert mixed.format_for(names[0]).name == "int8"
    assert mixed.format_for("model.layers.3.mlp.gate_proj").name == "fp16"
    assert mixed.format_for("model.layers.3.mlp.down_proj").name == "int4-g32"
    enc = [lin.name for lin in get_spec("all-minilm-l6").layer_linears(0)]
    assert enc[0] == "encoder.layer.0.attention.self.query"


def test_bad_names_and_shapes_raise():
    with pytest.raises(ValueError, match="unknown model 'gpt-9'"):
        get_spec("gpt-9")
    with pytest.raises(ValueError, match="n_heads = 14 is not a multiple of n_kv_heads = 4"):
        ModelSpec("bad", "decoder", 2, 896, 14, 4, 64, 4864, 100, 512, True)
    with pytest.raises(ValueError, match="field 'hidden' = 0"):
        ModelSpec("bad", "decoder", 2, 0, 14, 2, 64, 4864, 100, 512, True)


def test_decoder_forward_fields_follow_the_published_configs():
    l3 = get_spec("llama-3.2-3b")
    assert (l3.norm_eps, l3.activation, l3.rope_theta) == (1e-5, "silu", 500000.0)
    rs = l3.rope_scaling
    got = (rs.kind, rs.factor, rs.low_freq_factor, rs.high_freq_factor, rs.original_max_positions)
    assert got == ("llama3", 32.0, 1.0, 4.0, 8192)
    q = get_spec("qwen2.5-0.5b")
    assert (q.norm_eps, q.rope_theta, q.rope_scaling) == (1e-6, 1e6, None)
    assert get_spec("llama-2-7b").rope_theta == 10000.0
    mini = get_spec("all-minilm-l6")
    got = (mini.norm_eps, mini.activation, mini.rope_theta, mini.rope_scaling)
    assert got == (1e-12, "gelu", 0.0, None)
    for name in list_specs():
        assert get_spec(name).file == f"model/specs/{name}.toml"


SPEC_TOML = """name = "mine"
kind = "decoder"
n_layers = 2
hidden = 64
n_heads = 4
n_kv_heads = 2
head_dim = 16
intermediate = 128
vocab = 1000
max_positions = 256
tie_embeddings = true
norm_eps = 1e-5
activation = "silu"
rope_theta = 10000.0
"""


def test_a_spec_file_by_path(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(SPEC_TOML)
    spec = get_spec(str(path))
    assert (spec.name, spec.hidden, spec.kv_dim, spec.file) == ("mine", 64, 32, str(path))
    assert spec == dataclasses.replace(spec)  # `file` is not part of the spec's identity


@pytest.mark.parametrize(
    "edit, message",
    [
        (("n_layers = 2", "n_layers = -2"), "field 'n_layers' = -2"),
        (("hidden = 64", "hidden = 64.5"), "field 'hidden' = 64.5: expected int"),
        (('activation = "silu"', 'activation = "relu"'), "field 'activation' = 'relu'"),
        (("rope_theta = 10000.0\n", ""), "missing field 'rope_theta'"),
        (("norm_eps = 1e-5\n", ""), "missing field 'norm_eps'"),
        (("n_kv_heads = 2", "n_kv_heads = 3"), "n_heads = 4 is not a multiple of n_kv_heads = 3"),
        (("vocab = 1000", "vocab = 1000\nvocab_size = 1"), "unknown field 'vocab_size' = 1"),
        (
            ("rope_theta = 10000.0\n", 'rope_theta = 10000.0\n[rope_scaling]\nkind = "yarn"\n'),
            "field 'rope_scaling.kind' = 'yarn'",
        ),
    ],
)
def test_bad_spec_files_name_file_field_value(tmp_path, edit, message):
    path = tmp_path / "bad.toml"
    path.write_text(SPEC_TOML.replace(*edit))
    with pytest.raises(ValueError, match=f"bad.toml: .*{message}"):
        get_spec(str(path))
