"""Host cold-start measurement: the INT4 GEMV against its reference, the safetensors file and
its memmap views, page-cache eviction, and one small end-to-end run."""

import numpy as np
import pytest
from safetensors.numpy import load_file

from harmony_ref.device.coldstart_host import (
    evict,
    gemv_w4,
    gemv_w4_ref,
    host_metrics,
    measure_host_coldstart,
    mmap_tensors,
    resident_fraction,
    write_model_file,
)
from harmony_ref.quant.int4 import quantize_int4

GEMV_REL_TOL = 1e-5  # float32 sums in a different order (zero point folded into sum(x))


@pytest.mark.parametrize("shape,group", [((1, 32), 32), ((7, 256), 128), ((33, 96), 32), ((5, 128), 128)])
@pytest.mark.parametrize("scheme", ["asym", "sym"])
def test_gemv_w4_matches_reference(shape, group, scheme):
    rng = np.random.default_rng(shape[0] * 1000 + shape[1])
    w = rng.standard_normal(shape).astype(np.float32) * 0.02
    w[0, :group] = 0.0  # a constant (zero) group
    t = quantize_int4(w, group, scheme)
    x = rng.standard_normal(shape[1]).astype(np.float32)
    ref, got = gemv_w4_ref(t, x), gemv_w4(t, x)
    tol = GEMV_REL_TOL * (np.abs(gemv_w4_ref(t, np.abs(x))).max() + 1e-30) * np.sqrt(shape[1])
    bad = np.nonzero(~(np.abs(ref - got) <= tol))[0]
    assert not len(bad), f"first bad index {bad[0]}: ref {ref[bad[0]]}, got {got[bad[0]]}"


def test_gemv_w4_propagates_nan_input():
    t = quantize_int4(np.ones((3, 64), np.float32), 32, "asym")
    x = np.ones(64, np.float32)
    x[5] = np.nan
    assert np.isnan(gemv_w4(t, x)).all() and np.isnan(gemv_w4_ref(t, x)).all()


def test_file_round_trips_through_read_and_mmap(tmp_path):
    info = write_model_file(tmp_path / "m.safetensors", layers=2, rows=16, cols=256, group_size=128)
    assert info["bytes"] == (tmp_path / "m.safetensors").stat().st_size
    read, mapped = load_file(info["path"]), mmap_tensors(tmp_path / "m.safetensors")
    assert sorted(read) == sorted(mapped)
    for k in read:
        assert read[k].dtype == mapped[k].dtype and np.array_equal(read[k], mapped[k]), k
    assert not list(tmp_path.glob("*.tmp*")), "atomic write leaves no temp file"


def test_bad_file_is_named(tmp_path):
    p = tmp_path / "broken.safetensors"
    p.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(ValueError, match="broken.safetensors"):
        mmap_tensors(p)


def test_evict_reports_residency(tmp_path):
    info = write_model_file(tmp_path / "m.safetensors", layers=1, rows=256, cols=4096)
    (tmp_path / "m.safetensors").read_bytes()
    ev = evict(tmp_path / "m.safetensors")
    assert ev["eviction"].startswith(("confirmed", "failed", "unconfirmed"))
    frac = resident_fraction(tmp_path / "m.safetensors")
    if frac is not None:  # Linux: mincore available
        assert ev["resident_after_pct"] == pytest.approx(100 * frac, abs=100.0)
        assert info["bytes"] > 0


def test_measure_end_to_end_small(tmp_path):
    r = measure_host_coldstart(layers=2, rows=64, cols=256, steady_repeats=2, workdir=tmp_path)
    for mode in ("read", "mmap", "read_warm"):
        s = r["strategies"][mode]
        assert s["layers"] == 2 and s["load_ms"] > 0 and s["first_gemv_ms"] > 0 and s["peak_rss_mb"] > 0
    assert r["jit"]["compile_ms"] > r["jit"]["cached_ms"] > 0
    m = host_metrics(r)
    assert m["host_numba_compile_ms"].kind == "measured"
    assert not (tmp_path / "model-int4.safetensors").exists(), "the weights file is cleaned up"
