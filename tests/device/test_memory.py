"""Memory model: the source material's worked numbers and the app-budget check."""

import pytest

from harmony_ref.config import RunConfig
from harmony_ref.device.memory import kv_cache_bytes, memory_estimate, weights_bytes
from harmony_ref.device.runtime import load_profile
from harmony_ref.model.spec import get_spec
from harmony_ref.quant.policy import load_policy


def test_kv_cache_worked_number():
    # 2 x 32 layers x 32 KV heads x 128 head dim x 2048 tokens x 2 B (fp16)
    spec = get_spec("llama-2-7b")
    assert (spec.n_layers, spec.n_kv_heads, spec.head_dim) == (32, 32, 128)
    got = kv_cache_bytes(spec, 2048, "fp16")
    print(f"KV cache: {got:,} bytes = {got / 1e9:.2f} GB (decimal) = {got / 2**30:.2f} GiB")
    assert got == 2 * 32 * 32 * 128 * 2048 * 2 == 1_073_741_824
    assert round(got / 1e9, 2) == 1.07  # the source's "1.07 GB" is decimal GB of 2^30 bytes


def test_kv_cache_is_gqa_aware_and_int8_adds_scales():
    spec = get_spec("llama-3.2-3b")  # 8 KV heads for 24 query heads
    fp16 = kv_cache_bytes(spec, 2048)
    assert fp16 == 2 * 28 * 8 * 128 * 2048 * 2
    int8 = kv_cache_bytes(spec, 2048, "int8")
    assert int8 == 2 * 28 * 8 * (128 + 4) * 2048  # one float32 scale per token per head, K and V
    assert kv_cache_bytes(spec, 2048, batch=3) == 3 * fp16
    assert kv_cache_bytes(get_spec("all-minilm-l6"), 512) == 0


def test_7b_int4_is_about_3_5_gb_before_scales():
    got = weights_bytes(get_spec("llama-2-7b"), load_policy("int4-g128"), include_scales=False)
    print(f"Llama-2-7B at INT4, values only: {got / 1e9:.2f} GB")
    assert 3.2e9 < got < 3.6e9
    with_scales = weights_bytes(get_spec("llama-2-7b"), load_policy("int4-g128"))
    assert with_scales > got  # scales and zero points are real bytes


def test_3b_int4_g128_is_under_2_gb():
    got = weights_bytes(get_spec("llama-3.2-3b"), load_policy("int4-g128"))
    print(f"Llama-3.2-3B at int4-g128 with scales: {got / 1e9:.3f} GB")
    assert got < 2e9


def test_fp16_weights_are_two_bytes_per_parameter():
    for name in ("llama-3.2-3b", "qwen2.5-0.5b", "qwen2.5-7b", "all-minilm-l6"):
        spec = get_spec(name)
        assert weights_bytes(spec, load_policy("fp16")) == 2 * spec.param_count(), name


def test_budget_check():
    flagship, lowend = load_profile("harmony-flagship"), load_profile("harmony-lowend")
    fits = memory_estimate(flagship, RunConfig.from_names(policy="int4-g128"))
    assert fits.fits and fits.peak_bytes == pytest.approx(
        fits.weights_bytes + fits.kv_cache_bytes + fits.activations_bytes + fits.workspace_bytes
    )
    assert fits.budget_bytes == pytest.approx(12e9 * 0.33)
    too_big = memory_estimate(lowend, RunConfig.from_names(policy="mixed"))
    assert not too_big.fits and too_big.headroom_bytes < 0
    # A 7B at fp16 fits no phone's app budget.
    assert not memory_estimate(
        flagship, RunConfig.from_names(model="qwen2.5-7b", policy="fp16")
    ).fits


def test_kv_cache_bytes_match_the_kernel_cache_byte_for_byte():
    # The model's KV cache size is the real storage of harmony_ref.kernels.KVCache.
    from harmony_ref.kernels import KVCache
    from harmony_ref.model.spec import get_spec

    spec = get_spec("qwen2.5-0.5b")
    for kv_dtype in ("fp16", "int8"):
        per_layer = KVCache(256, spec.n_kv_heads, spec.head_dim, dtype=kv_dtype).nbytes
        assert kv_cache_bytes(spec, 256, kv_dtype) == spec.n_layers * per_layer
