"""Op graph: real weight bytes, FLOPs that add up, and a fusion pass that only ever removes
launches and DRAM traffic."""

import dataclasses

import pytest

from harmony_ref.model import graph
from harmony_ref.model.graph import Op, build_graph, fuse
from harmony_ref.model.spec import get_spec, list_specs
from harmony_ref.quant.policy import load_policy, parse_format, shipped_policies


def _phases(spec):
    yield "prefill", dict(tokens=128)
    if spec.is_decoder:
        yield "decode", dict(context=1000)


@pytest.mark.parametrize("model", list_specs())
def test_fusion_never_adds_launches_and_keeps_flops(model):
    spec = get_spec(model)
    for policy in shipped_policies():
        pol = load_policy(policy)
        for phase, kw in _phases(spec):
            raw = build_graph(spec, pol, phase, fused=False, **kw)
            fused = build_graph(spec, pol, phase, fused=True, **kw)
            assert fused.kernel_launches < raw.kernel_launches, (model, policy, phase)
            assert fused.flops == pytest.approx(raw.flops, rel=1e-12)
            assert fused.dram_bytes <= raw.dram_bytes
            assert fused.weight_bytes == raw.weight_bytes


def test_norm_bias_activation_become_one_kernel():
    n = 1000 * 2  # 1000 fp16 values
    ops = [
        Op("ln", "norm", "ln", vector_flops=5000, act_in_bytes=n, act_out_bytes=n),
        Op(
            "ln.bias",
            "bias",
            "ln",
            vector_flops=1000,
            act_in_bytes=n,
            act_out_bytes=n,
            reads_prev_bytes=n,
        ),
        Op(
            "gelu",
            "activation",
            "ln",
            vector_flops=8000,
            act_in_bytes=n,
            act_out_bytes=n,
            reads_prev_bytes=n,
        ),
    ]
    (one,) = fuse(ops)
    assert one.fused == ("ln.bias", "gelu")
    assert one.vector_flops == 14000
    assert (one.act_in_bytes, one.act_out_bytes) == (n, n)  # the two intermediates never hit DRAM


def test_decoder_fusion_merges_what_runtimes_merge():
    g = build_graph(get_spec("qwen2.5-0.5b"), load_policy("int4-g128"), "decode", context=64)
    by_name = {op.name: op for op in g.ops}
    q = by_name["model.layers.0.self_attn.q_proj"]
    assert q.fused == ("model.layers.0.self_attn.q_proj.bias",)
    assert by_name["model.layers.0.self_attn.o_proj"].fused == ("model.layers.0.residual_attn",)
    assert by_name["model.layers.0.mlp.gate_proj"].fused == ("model.layers.0.mlp.act_fn",)
    attn = by_name["model.layers.0.self_attn.attn_qk"]
    assert attn.fused == ("model.layers.0.self_attn.softmax", "model.layers.0.self_attn.attn_pv")
    assert by_name["model.layers.0.self_attn.rope"].fused == ("model.layers.0.self_attn.kv_write",)
    # Per block: norm, q, k, v, rope, attention, o, norm, gate, up, down = 11 kernels.
    assert g.kernel_launches == 1 + 11 * 24 + 2


def test_linear_weight_bytes_are_the_real_stored_sizes():
    spec, pol = get_spec("llama-3.2-3b"), load_policy("mixed")
    g = build_graph(spec, pol, "decode", context=10)
    matmuls = {op.layer: op for op in g.ops if op.kind == "matmul"}
    assert len(matmuls) == 7 * spec.n_layers + 1
    for lin in spec.linears():
        fmt = pol.format_for(lin.name)
        assert matmuls[lin.name].weight_bytes == fmt.nbytes(lin.n_out, lin.k_in), lin.name
        assert matmuls[lin.name].dtype == fmt.compute_dtype
    down = matmuls["model.layers.0.mlp.down_proj"]
    # int4-g32 asym: 4 bits + (fp16 scale + int8 zero point) per 32 weights = 4.75 bits.
    assert down.weight_bytes == 3072 * 8192 * 4.75 / 8


def test_decode_flops_are_two_per_parameter_plus_attention():
    spec = get_spec("llama-3.2-1b")
    ctx = 512
    g = build_graph(spec, load_policy("int8"), "decode", context=ctx)
    matmul = sum(lin.n_out * lin.k_in for lin in spec.linears())
    attention = spec.n_layers * 2 * (2 * ctx * spec.q_dim)  # QK^T and P.V
    matrix_flops = sum(op.flops for op in g.ops)
    assert matrix_flops == 2 * matmul + attention


def test_decode_is_affine_in_context():
    # The cost model integrates decode over the context exactly by relying on this.
    spec, pol = get_spec("qwen2.5-1.5b"), load_policy("int4-g32")
    g = [build_graph(spec, pol, "decode", context=c, kv_dtype="int8") for c in (100, 101, 357)]
    for a, b, c in zip(*(x.ops for x in g)):
        for f in (
            "flops",
            "vector_flops",
            "kv_read_bytes",
            "act_in_bytes",
            "act_out_bytes",
            "tile_bytes",
        ):
            va, vb, vc = getattr(a, f), getattr(b, f), getattr(c, f)
            assert vc == pytest.approx(va + (vb - va) * 257, rel=1e-12), (a.name, f)


def test_gqa_kv_read_per_decode_step():
    spec = get_spec("llama-3.2-3b")
    g = build_graph(spec, load_policy("fp16"), "decode", context=2048)
    kv = sum(op.kv_read_bytes for op in g.ops)
    assert kv == 2 * spec.n_layers * spec.n_kv_heads * spec.head_dim * 2048 * 2


def test_unknown_phase_and_bad_groups_raise():
    spec = get_spec("qwen2.5-0.5b")
    with pytest.raises(ValueError, match="phase 'train'"):
        build_graph(spec, load_policy("fp16"), "train")
    with pytest.raises(ValueError, match="encoder"):
        build_graph(get_spec("all-minilm-l6"), load_policy("fp16"), "decode", context=3)
    # A group that does not divide K is narrowed to gcd(group, K), as the runtime stores it
    # (int4-g96 on Qwen's K = 896 rows: g32), so the graph counts what would be stored.
    from harmony_ref.model.graph import weight_nbytes

    g96, g32 = parse_format("int4-g96"), parse_format("int4-g32")
    assert weight_nbytes(g96, 128, 896, "x") == g32.nbytes(128, 896)
    pol = dataclasses.replace(load_policy("fp16"), default=g96)
    assert build_graph(spec, pol, "decode", context=3).weight_bytes > 0


def test_graph_lists_every_op_with_layer_names():
    spec = get_spec("all-minilm-l6")
    g = build_graph(spec, load_policy("int8"), "prefill", tokens=128, fused=False)
    names = [op.name for op in g.ops]
    assert len(names) == g.kernel_launches == len(set(names))
    assert "encoder.layer.5.intermediate.gelu" in names and names[-1] == "pooling.mean"


@pytest.mark.parametrize("name", list_specs())
@pytest.mark.parametrize("batch", [1, 3])
def test_ops_carry_the_shapes_their_counts_come_from(name, batch):
    """Every op knows its m, n, k (the host runs ops from them), and they agree with its FLOP and
    byte counts, fused or not."""
    spec = get_spec(name)
    a = graph.ACT_BYTES
    phases = [("prefill", dict(tokens=7))]
    if spec.is_decoder:
        phases.append(("decode", dict(context=9)))
    for phase, kw in phases:
        unfused = build_graph(spec, load_policy("int4-g128"), phase, fused=False, batch=batch, **kw)
        for op in unfused.ops:
            assert op.m > 0 and op.n > 0, op.name
            if op.kind == "matmul":
                assert op.flops == 2.0 * op.m * op.n * op.k, op.name
                assert op.act_in_bytes == op.m * op.k * a, op.name
                assert op.act_out_bytes == op.m * op.n * a, op.name
            elif op.kind in (
                "bias",
                "activation",
                "gate_mul",
                "residual_add",
                "rope",
                "norm",
                "embedding",
            ):
                assert op.act_out_bytes == op.m * op.n * a, op.name
            elif op.kind in ("kv_write", "pool"):
                assert op.act_in_bytes == op.m * op.n * a, op.name
            elif op.kind == "softmax":
                scores = batch * spec.n_heads * unfused.tokens * unfused.context
                assert op.m * op.n == scores, op.name
            else:  # attn_qk, attn_pv
                want = (batch * unfused.tokens, unfused.context, spec.head_dim)
                assert (op.m, op.n, op.k) == want, op.name
        fused = build_graph(spec, load_policy("int4-g128"), phase, batch=batch, **kw)
        first = {op.name: op for op in unfused.ops}
        for op in fused.ops:  # a fused op keeps the shape of its first op
            assert (op.m, op.n, op.k) == (first[op.name].m, first[op.name].n, first[op.name].k)
