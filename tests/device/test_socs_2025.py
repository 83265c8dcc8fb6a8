"""The SoCs, models and NPU policies of 2025-26 (issue 44, item 6): `predict` prices every new SoC
with every runtime whose unit it has, on every new model, through the CLI; a runtime whose unit
a SoC lacks is one line and exit 2; w4a16 / w8a16 keep 16-bit activations, and an NPU runtime
multiplies them in FP16."""

import json
import math

import pytest

from harmony_ref.cli import main
from harmony_ref.config import RunConfig
from harmony_ref.device.physics import bounds
from harmony_ref.device.runtime import load_profile
from harmony_ref.device.soc import load_soc
from harmony_ref.model.graph import build_graph
from harmony_ref.quant.policy import load_policy

MODELS = ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "smollm2-135m", "gemma-3-4b")
CPU_GPU = ("llama.cpp-cpu", "executorch-xnnpack", "mlc-gpu")
# Each new SoC with the runtimes it has the unit for: every one has CPU clusters and a GPU; of the
# NPU runtimes, QNN runs on Snapdragon's Hexagon only and MindSpore Lite's NPU on Kirin only.
RUNTIMES = {
    "snapdragon-8-elite-gen-5": CPU_GPU + ("qnn-npu",),
    "dimensity-9400": CPU_GPU,
    "kirin-9020": CPU_GPU + ("mslite-npu",),
    "tensor-g4": CPU_GPU,
    "exynos-2500": CPU_GPU,
}
DEFAULTS = {
    "snapdragon-8-elite-gen-5": "qnn-npu",
    "dimensity-9400": "llama.cpp-cpu",
    "kirin-9020": "mslite-npu",
    "tensor-g4": "llama.cpp-cpu",
    "exynos-2500": "llama.cpp-cpu",
}
COMBOS = [(soc, rt, model) for soc, rts in RUNTIMES.items() for rt in rts for model in MODELS]


def _predict(capsys, *args) -> dict:
    argv = ["predict", *args, "--policy", "q4_0", "--prompt", "128", "--new", "64", "--json"]
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("soc, runtime, model", COMBOS)
def test_predict_prints_rates_ttft_and_memory(soc, runtime, model, capsys):
    out = _predict(capsys, "--profile", soc, "--runtime", runtime, "--model", model)
    assert out["runtime"] == runtime and out["profile"].startswith(f"{soc}+{runtime}")
    m = {k: v["value"] for k, v in out["metrics"].items()}
    for key in ("prefill_tokens_per_s", "decode_tokens_per_s", "ttft_ms", "peak_memory_mb"):
        assert math.isfinite(m[key]) and m[key] > 0, key
    # no prediction faster than the merged profile's own bandwidth and compute bounds
    cfg = RunConfig.from_names(model, "q4_0", 128, 64)
    b = bounds(load_profile(soc, runtime), cfg)
    assert m["decode_tokens_per_s"] <= b.decode_tokens_per_s_max
    assert m["prefill_ms"] >= b.prefill_ms_min
    # the weights alone are a floor of the peak memory (a 4-bit 4B model is over 2 GB)
    assert m["peak_memory_mb"] >= m["weights_mb"] > 0


@pytest.mark.parametrize("soc", sorted(DEFAULTS))
def test_each_new_soc_runs_its_default_runtime(soc, capsys):
    assert load_soc(soc).default_runtime == DEFAULTS[soc]
    out = _predict(capsys, "--profile", soc, "--model", "qwen3-1.7b")
    assert out["runtime"] == DEFAULTS[soc]


@pytest.mark.parametrize(
    "cut, runtime, says",
    [
        ("[gpu]", "mlc-gpu", "has no [gpu] section"),
        ("[cpu]", "llama.cpp-cpu", "has no [cpu] clusters"),
    ],
)
def test_a_runtime_whose_unit_the_soc_lacks_is_one_line(tmp_path, capsys, cut, runtime, says):
    """tensor-g4 without its GPU (or its CPU clusters): the GPU (CPU) runtime is refused with
    exit 2 and one line naming the file, before any work."""
    from importlib import resources

    text = (resources.files("harmony_ref") / "device/profiles/tensor-g4.toml").read_text()
    kept, skip = [], False
    for line in text.splitlines():
        if line.startswith("["):
            skip = line == cut or line.lstrip("[").startswith(f"{cut[1:-1]}.")
        if not skip:
            kept.append(line)
    path = tmp_path / "no-unit.toml"
    path.write_text("\n".join(kept) + "\n")
    argv = ["predict", "--profile", str(path), "--runtime", runtime, "--model", "qwen3-0.6b"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and len(err) < 200 and "Traceback" not in err
    assert str(path) in err and says in err


@pytest.mark.parametrize("policy, weight, bits", [("w4a16", "int4", 4.125), ("w8a16", "int8", 8)])
def test_npu_policies_keep_16_bit_activations(policy, weight, bits):
    """w4a16 / w8a16: every Linear's weights in 4 / 8 bits, its activations 16-bit in the op graph
    (2 bytes an element, no int8 activations), multiplied in FP16 on an NPU runtime whose
    weight-only matmuls run in float (qnn-npu, mslite-npu); W4A8 (dynamic int8) differs."""
    p = load_policy(policy)
    fmt = p.format_for("model.layers.0.mlp.up_proj")
    assert fmt.compute_dtype == weight and fmt.bits_per_weight(1024) == pytest.approx(bits, 0.01)
    cfg = RunConfig.from_names("qwen3-1.7b", policy, 128, 64)
    ops = [
        op
        for op in build_graph(cfg.spec, p, "prefill", 128, fused=False).ops
        if op.kind == "matmul"
    ]
    assert ops and all(op.act_dtype == "fp16" and op.act_in_bytes == op.m * op.k * 2 for op in ops)
    for soc, npu in (("snapdragon-8-elite-gen-5", "qnn-npu"), ("kirin-9020", "mslite-npu")):
        compute = load_profile(soc, npu).compute
        assert {compute.op_compute_dtype(op) for op in ops} == {"fp16"}
    w4a8 = build_graph(cfg.spec, load_policy("w4a8-g32"), "prefill", 128).ops
    assert {op.act_dtype for op in w4a8 if op.kind == "matmul" and op.name != "lm_head"} == {"int8"}
