"""The decoder runtime on tiny random checkpoints (Llama, Qwen2, Qwen3, Gemma 3): prefill logits
== step-by-step decode logits (both paths, fp16 and int8 KV; past Gemma's sliding window), the
kernel path against the NumPy oracle per policy, fused and unfused Linears agreeing, chunked
prefill, the context limit, the local layers' window-sized caches."""

import numpy as np
import pytest

from harmony_ref.kernels._testing import assert_within
from harmony_ref.quant.policy import int4_format_for_rows, parse_format, policy_from_dict
from harmony_ref.runtime.llama import Llama, LlamaRef
from tests.fixtures.decoder.tiny import tiny_config, tiny_weights

TOKENS = [1, 40, 50, 260, 268, 35, 52, 53, 7, 2, 99, 100, 101]
# Prefill vs decode on the same path: same kernels, causal attention over the same cache; the
# batched matmuls may sum in another order (BLAS blocking, M-blocked int kernels).
PREFILL_VS_DECODE_ABS_TOL = {"reference": 5e-4, "fp32": 5e-4, "int8": 2e-3, "int4-g32": 2e-3}
# Paths that quantize activations to int8 (int8, int4-g32, the GGML mixes): the float ops before
# a quantizer differ in their last bits between prefill's and decode's kernels, and a value on a
# rounding boundary then lands one activation level apart. One such flip in an early token's
# K / V moves every later logit a little: measured under tests/emulated_cpus.py (Haswell and
# Zen 3 codegen, AVX2) max |diff| 0.063 on these tiny models, none on Zen 4 / Ice Lake. The
# bound allows that, and the median still has to meet PREFILL_VS_DECODE_ABS_TOL (a path bug
# moves every logit, by O(1)).
ACT_LEVEL_FLIP_ABS_TOL = 0.1


def assert_paths_agree(got, ref, name: str, what: str) -> None:
    """Prefill vs decode (or chunked) logits of one model: within PREFILL_VS_DECODE_ABS_TOL, or
    for a quantized-activation path within ACT_LEVEL_FLIP_ABS_TOL with its median within it."""
    if name in ("reference", "fp32"):
        assert_within(got, ref, PREFILL_VS_DECODE_ABS_TOL[name], what)
        return
    assert_within(got, ref, ACT_LEVEL_FLIP_ABS_TOL, what)
    median = float(np.median(np.abs(np.asarray(got, np.float64) - ref)))
    assert median <= PREFILL_VS_DECODE_ABS_TOL[name], f"{what}: median |diff| {median:.3g}"


# Kernel path vs the FP32 oracle on a random 2-layer model: RMS of the logit error relative to
# the RMS of the logits (measured: fp32 2e-4 (fp16 KV cache), fp16 5e-4, int8 0.017 (int8
# weights and activations), int4-g32 0.15 (4-bit weights of random, not trained, matrices)).
KERNEL_VS_REF_REL_RMS = {"fp32": 1e-3, "fp16": 2e-3, "int8": 0.04, "int4-g32": 0.3}


def _model(name, w, kv="fp16"):
    return LlamaRef(w) if name == "reference" else Llama(w, name, kv)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "gemma3"])
@pytest.mark.parametrize("name", ["reference", "fp32", "int8", "int4-g32"])
@pytest.mark.parametrize("kv", ["fp16", "int8"])
def test_prefill_equals_step_by_step_decode(arch, name, kv):
    if name == "reference" and kv == "int8":
        pytest.skip("the reference has a float32 cache only")
    w = tiny_weights(tiny_config(arch), seed=3)
    m = _model(name, w, kv)
    full = m.prefill(TOKENS, all_logits=True)
    assert full.shape == (len(TOKENS), w.config.vocab_size) and full.dtype == np.float32
    m.reset()
    steps = np.stack([m.decode(t) for t in TOKENS])
    assert_paths_agree(steps, full, name, f"{arch} {name} kv={kv}")
    # prefill in two chunks, then decode: same as one prefill
    m.reset()
    a = m.prefill(TOKENS[:5], all_logits=True)
    b = m.prefill(TOKENS[5:], all_logits=True)
    assert_paths_agree(np.concatenate([a, b]), full, name, "chunked")


def test_local_layers_keep_only_the_window_and_see_only_it():
    """Gemma 3's local layers: a 4-slot ring however long the context; a token further back
    than the window changes the local layers' attention only through the global layer."""
    c = tiny_config("gemma3")
    w = tiny_weights(c, seed=3)
    m = Llama(w, "fp32", max_context=64)
    assert [b.cache.max_context for b in m.blocks] == [4, 4, 64]
    m.prefill(TOKENS)
    assert [b.cache.length for b in m.blocks] == [4, 4, len(TOKENS)]
    assert m.kv_cache_bytes() == sum(b.cache.nbytes for b in m.blocks)
    # one local layer: the logits at position p depend only on tokens p - 3 .. p
    only_local = tiny_weights(tiny_config("gemma3", n_layers=1, local_layers=(0,)), seed=3)
    a = LlamaRef(only_local).prefill([5, 6] + TOKENS[:6], all_logits=True)
    b = LlamaRef(only_local).prefill([9, 70] + TOKENS[:6], all_logits=True)
    assert np.abs(a[:5] - b[:5]).max() > 1e-3  # the first two tokens are in view here ...
    assert_within(a[5:], b[5:], 1e-4, "... and out of the window of every later query")
    fast = Llama(only_local, "fp32")
    got = fast.prefill([9, 70] + TOKENS[:6], all_logits=True)
    assert_within(got, b, 2e-2, "kernel path, one local layer")


def _rel_rms(got, ref):
    return float(np.sqrt(((got - ref) ** 2).mean() / (ref**2).mean()))


@pytest.mark.parametrize("arch", ["llama", "qwen3", "gemma3"])
@pytest.mark.parametrize("policy", sorted(KERNEL_VS_REF_REL_RMS))
def test_kernel_path_follows_the_oracle(policy, arch):
    w = tiny_weights(tiny_config(arch, tied=True), seed=4)
    ref = LlamaRef(w).prefill(TOKENS, all_logits=True)
    got = Llama(w, policy).prefill(TOKENS, all_logits=True)
    err = _rel_rms(got, ref)
    assert err <= KERNEL_VS_REF_REL_RMS[policy], f"{policy}: relative RMS error {err:.3g}"
    assert (got.argmax(1) == ref.argmax(1)).mean() >= (0.99 if policy == "fp32" else 0.6)


def test_unfused_mixed_formats_match_separate_linears():
    w = tiny_weights(seed=5)
    # q int8, k/v int4: no fused qkv; gate fp16, up int4: no fused gate_up
    mixed = policy_from_dict(
        {
            "name": "mx",
            "default": "int4-g32",
            "keep_fp16_layers": ["gate_proj"],
            "keep_int8_layers": ["q_proj"],
        },
        "test",
    )
    m = Llama(w, mixed)
    assert len(m.blocks[0].qkv.linears) == 2 or len(m.blocks[0].qkv.linears) == 3
    f = m.formats()
    assert f["model.layers.0.self_attn.q_proj"] == "int8"
    assert f["model.layers.1.mlp.gate_proj"] == "fp16" and f["lm_head"] == "int4-g32"
    full = m.prefill(TOKENS, all_logits=True)
    m.reset()
    steps = np.stack([m.decode(t) for t in TOKENS])
    assert_paths_agree(steps, full, "int4-g32", "mixed prefill vs decode")
    ref = LlamaRef(w).prefill(TOKENS, all_logits=True)
    assert _rel_rms(full, ref) <= KERNEL_VS_REF_REL_RMS["int4-g32"]


def test_fused_qkv_equals_separate_quantization():
    """Row-wise quantization makes quantize(concat) == concat(quantize): fused == unfused."""
    w = tiny_weights(seed=6)
    fused = Llama(w, "int8")
    forced = policy_from_dict(
        {"name": "int8-split", "default": "int8", "layers": {"*k_proj": "int8"}}, "test"
    )
    assert len(fused.blocks[0].qkv.linears) == 1
    m2 = Llama(w, forced)  # same formats: still fused, same numbers
    np.testing.assert_array_equal(fused.prefill(TOKENS), m2.prefill(TOKENS))


def test_group_fallback_for_rows_not_a_multiple():
    assert int4_format_for_rows(parse_format("int4-g128"), 576).name == "int4-g64"
    assert int4_format_for_rows(parse_format("int4-g32"), 576).name == "int4-g32"
    w = tiny_weights(tiny_config(dim=96, ffn_dim=160, n_heads=6, head_dim=16), seed=1)
    m = Llama(w, "int4-g128")  # K = 96 -> g32, K = 160 -> g32
    assert m.formats()["model.layers.0.mlp.down_proj"] == "int4-g32"


def test_context_limit():
    w = tiny_weights()
    m = Llama(w, "fp32", max_context=8)
    m.prefill(TOKENS[:8])
    with pytest.raises(ValueError, match="context full"):
        m.decode(5)
    r = LlamaRef(w, max_context=4)
    with pytest.raises(ValueError, match="context full"):
        r.prefill(TOKENS[:5])


def test_weight_bytes_follow_the_formats():
    w = tiny_weights()
    sizes = {p: Llama(w, p).weight_bytes()["linear"] for p in ("fp32", "fp16", "int8", "int4-g32")}
    assert sizes["fp32"] == 2 * sizes["fp16"]
    assert sizes["int4-g32"] < sizes["int8"] < sizes["fp16"]


def test_mixed_q4_plan_runs_as_one_matmul_per_group():
    """A mixed GGUF plan (q, v q4_1; k q4_0; gate q4_0, up q4_1) fuses q|k|v and gate|up into one
    call each (kernels/matmul_ggml.prepare_q4_rows), reports each part's own format, and gives the
    same logits as the per-part calls (the kernel test holds that bit for bit)."""
    w = tiny_weights(seed=8)
    mixed = policy_from_dict(
        {"name": "q4-mix", "default": "q4_1", "layers": {"*k_proj": "q4_0", "*gate_proj": "q4_0"}},
        "test",
    )
    m = Llama(w, mixed)
    assert m.blocks[0].qkv.single is not None and m.blocks[0].gate_up.single is not None
    f = m.formats()
    assert f["model.layers.0.self_attn.k_proj"] == "q4_0"
    assert f["model.layers.0.self_attn.q_proj"] == "q4_1"
    assert f["model.layers.0.mlp.gate_proj"] == "q4_0"
    full = m.prefill(TOKENS, all_logits=True)
    m.reset()
    steps = np.stack([m.decode(t) for t in TOKENS])
    assert_paths_agree(steps, full, "int4-g32", "q4 mix prefill vs decode")
    ref = LlamaRef(w).prefill(TOKENS, all_logits=True)
    assert _rel_rms(full, ref) <= KERNEL_VS_REF_REL_RMS["int4-g32"]
