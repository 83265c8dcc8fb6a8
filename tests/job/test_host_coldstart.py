"""Host cold-start measurement: the safetensors file and its memmap views, page-cache eviction,
and one small end-to-end run."""

import numpy as np
import pytest
from safetensors.numpy import load_file

from harmony_ref.job.host_coldstart import (
    evict,
    host_metrics,
    measure_host_coldstart,
    mmap_tensors,
    resident_fraction,
    write_model_file,
)


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


@pytest.fixture(scope="module")
def small_measurement(tmp_path_factory):
    # One real (small) run shared by the tests below: each run spawns five interpreters and
    # compiles the GEMV kernels once from an empty Numba cache.
    workdir = tmp_path_factory.mktemp("coldstart")
    return workdir, measure_host_coldstart(
        layers=2, rows=64, cols=256, steady_repeats=2, workdir=workdir
    )


def test_measure_end_to_end_small(small_measurement):
    workdir, r = small_measurement
    for mode in ("read", "mmap", "read_warm"):
        s = r["strategies"][mode]
        assert s["layers"] == 2 and s["load_ms"] > 0 and s["first_gemv_ms"] >= s["repack_ms"] > 0
        assert s["peak_rss_mb"] > 0
        if s["rss_high_water_mb"] is not None:  # the kernel's peak is never below a sample
            assert s["rss_high_water_mb"] >= s["peak_rss_mb"] * 0.99
        assert s["steady_gemv_ms"] == min(s["steady_gemv_samples_ms"]) <= s["steady_gemv_median_ms"]
    assert r["strategies"]["read"]["eviction"].startswith(("confirmed", "failed", "unconfirmed"))
    assert r["jit"]["compile_ms"] > r["jit"]["cached_ms"] > 0
    m = host_metrics(r)
    assert m["host_numba_compile_ms"].kind == "measured"
    assert not (workdir / "model-int4.safetensors").exists(), "the weights file is cleaned up"


def test_coldstart_command_prints_measured_side_by_side(small_measurement, monkeypatch, capsys):
    import harmony_ref.job.host_coldstart as host
    from harmony_ref.cli import main

    monkeypatch.setattr(host, "measure_host_coldstart", lambda *a, **k: small_measurement[1])
    assert main(["coldstart", "--profile", "harmony-flagship", "--measure"]) == 0
    out = capsys.readouterr().out
    assert "load by read" in out and "measured on this host" in out
    assert main(["coldstart", "--profile", "harmony-flagship", "--measure", "--json"]) == 0
    assert "measured_host" in capsys.readouterr().out
