"""The formats table (quant/formats.py FACTS) is complete, consistent and the only place a format
is described: every entry's GGUF type, id and file type are the `gguf` package's, its nbytes is
the size of the arrays its quantizer really writes, its nominal bits agree with its block bytes
and with ggml's, its name parses back to it, the steps it claims (GPTQ/AWQ fitting) take it and
the others refuse it, and no module outside the table compares a format's kind."""

import re
from pathlib import Path

import numpy as np
import pytest

from harmony_ref.kernels.formats import FORMATS
from harmony_ref.quant.formats import BY_GGUF_TYPE, FACTS, LAYOUTS, facts_of
from harmony_ref.quant.ggml import BLOCK_BYTES as GGML_BLOCK_BYTES
from harmony_ref.quant.gptq import gptq_quantize
from harmony_ref.quant.kquants import BLOCK_DTYPES, BLOCK_WEIGHTS
from harmony_ref.quant.policy import parse_format

ROOT = Path(__file__).resolve().parents[2] / "harmony_ref"
TABLE_MODULES = {"quant/formats.py", "kernels/formats.py"}
GROUP = 32
AWKWARD = [(1, 32), (3, 64), (7, 96), (17, 160), (5, 256)]
# ggml's block sizes as the containers declare them (quant/ggml.py, quant/kquants.py): weights
# and bytes per block
BLOCK_BYTES = GGML_BLOCK_BYTES | {q: d.itemsize for q, d in BLOCK_DTYPES.items()}
BLOCK_LENGTH = dict.fromkeys(GGML_BLOCK_BYTES, 32) | BLOCK_WEIGHTS


def test_every_entry_is_complete():
    assert set(FORMATS) == set(FACTS)
    kinds = [(f.kind, f.scheme) for f in FACTS.values()]
    assert len(set(kinds)) == len(kinds), "one entry per (kind, scheme)"
    for name, f in FACTS.items():
        assert f.name == name and f.bits > 0 and f.scales in LAYOUTS and f.layout
        assert f.compute_dtype in ("fp16", "int8", "int4"), name
        assert f.nearest_gguf in FACTS and FACTS[f.nearest_gguf].gguf_type, name
        assert facts_of(f.kind, f.scheme) is f
        assert FORMATS[name].facts is f and FORMATS[name].kernel
        assert f.grouped == (f.scheme is not None), name


def test_compute_dtypes_are_priced_by_the_cost_model():
    from harmony_ref.device.cost import DTYPES

    assert {f.compute_dtype for f in FACTS.values()} <= set(DTYPES)


@pytest.mark.parametrize("name", sorted(FACTS))
def test_names_round_trip_through_parse_format(name):
    f = FACTS[name]
    fmt = parse_format(f.format_name(GROUP))
    assert fmt.facts is f and fmt.name == f.format_name(GROUP)
    assert parse_format(fmt.name) == fmt
    for alias in f.aliases:
        assert parse_format(alias) == fmt


@pytest.mark.parametrize("name", sorted(f.name for f in FACTS.values() if f.gguf_type))
def test_gguf_ids_names_and_sizes_are_the_gguf_packages(name):
    gguf = pytest.importorskip("gguf")
    f = FACTS[name]
    t = gguf.GGMLQuantizationType[f.gguf_type]
    assert t.value == f.gguf_id and t.name == f.gguf_type
    assert BY_GGUF_TYPE[f.gguf_type] is f  # GGUF type -> format -> GGUF type
    block, size = gguf.GGML_QUANT_SIZES[t]
    assert f.nbytes(1, block, GROUP) == size, "a block (a float: one weight) is ggml's size"
    if f.ggml:
        assert (f.block, f.block_bytes) == (block, size) == (BLOCK_LENGTH[name], BLOCK_BYTES[name])
    if f.file_type is not None:
        assert f.file_type in gguf.LlamaFileType.__members__


def test_formats_without_a_gguf_type_name_the_one_a_refusal_suggests():
    for f in FACTS.values():
        assert (f.gguf_type is None) == (f.gguf_id is None)
        if f.gguf_type is not None:
            assert f.nearest_gguf == f.name


@pytest.mark.parametrize("name", sorted(FACTS))
@pytest.mark.parametrize("n, k", AWKWARD)
def test_nbytes_is_the_size_of_what_the_quantizer_writes(name, n, k):
    f = FORMATS[name]
    k = k * f.facts.block // 32 if f.facts.block > 32 else k  # K-quants: 8 x 32-long blocks
    w = np.random.default_rng(n * k).standard_normal((n, k)).astype(np.float32)
    stored = f.quantize(w, GROUP)
    fmt = parse_format(FACTS[name].format_name(GROUP))
    arrays = sum(a.nbytes for a in f.arrays(stored).values())
    assert FACTS[name].nbytes(n, k, GROUP) == fmt.nbytes(n, k) == arrays == stored.nbytes


@pytest.mark.parametrize("name", sorted(FACTS))
def test_nominal_bits_agree_with_the_layout(name):
    f = FACTS[name]
    k = 4096
    overhead_bits = 8.0 * f.nbytes(1, k, GROUP) / k - f.bits
    per_row = {"none": 0, "row": 1, "group": k // GROUP, "block": k // max(f.block, 1)}
    assert overhead_bits == pytest.approx(8.0 * f.scale_bytes * per_row[f.scales] / k)
    if f.ggml:
        assert f.block_bytes * 8 == f.block * f.bits + 8 * f.scale_bytes
        assert (BLOCK_LENGTH[name], BLOCK_BYTES[name]) == (f.block, f.block_bytes)
    if not f.quantized:
        assert np.dtype(f.dtype).itemsize * 8 == f.bits


@pytest.mark.parametrize("name", sorted(FACTS))
def test_gptq_takes_exactly_the_fitted_formats(name):
    fmt = parse_format(FACTS[name].format_name(GROUP))
    w = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    h = np.eye(64) * 2.0
    if FACTS[name].fitted:
        assert FORMATS[name].dequantize(gptq_quantize(w, h, fmt).stored).shape == w.shape
    else:
        with pytest.raises(ValueError, match="GPTQ quantizes to"):
            gptq_quantize(w, h, fmt)


# `kind ==` on anything (issue 46's grep): a format's kind is the table's to compare, and other
# kinds (op kinds, metric kinds, model kinds, events) read as what they mean
KIND_COMPARISON = re.compile(r"\bkind\s*==")


def test_no_module_outside_the_table_compares_a_kind():
    hits = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if rel not in TABLE_MODULES and KIND_COMPARISON.search(line):
                hits.append(f"{rel}:{i}: {line.strip()}")
    assert not hits, "\n".join(hits)
