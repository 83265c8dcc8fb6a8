"""Physics sanity: a measurement faster than the profile's roofline is flagged `implausible`
(decode tokens/s above bandwidth / weight bytes per token, an op faster than its compute floor),
a plausible one is left alone. The bounds are worked out by hand for one case."""

import shlex
import sys
from pathlib import Path

import pytest

from harmony_ref.backends.command import CommandDevice
from harmony_ref.config import RunConfig
from harmony_ref.device import physics
from harmony_ref.device.runtime import load_profile
from harmony_ref.metrics import Metrics
from harmony_ref.units import GB

FAKE = Path(__file__).parents[1] / "fake_device"


@pytest.fixture(scope="module")
def flagship():
    return load_profile("harmony-flagship")


@pytest.fixture(scope="module")
def cfg():
    return RunConfig.from_names(
        model="llama-3.2-1b", policy="int4-g32", prompt_tokens=512, new_tokens=128
    )


def test_decode_bound_by_hand(flagship, cfg):
    b = physics.bounds(flagship, cfg)
    # every matmul weight once per token: sum of WeightFormat.nbytes over spec.linears()
    wb = sum(cfg.policy.format_for(w.name).nbytes(w.n_out, w.k_in) for w in cfg.spec.linears())
    assert b.weight_bytes == wb
    assert b.decode_tokens_per_s_max == pytest.approx(
        flagship.memory.dram_bandwidth_gbps * GB / wb, rel=1e-12
    )
    assert b.decode_step_ms_min == pytest.approx(1e3 / b.decode_tokens_per_s_max, rel=1e-12)


def measured(**values):
    m = Metrics()
    units = {"decode_tokens_per_s": ("tokens/s", "higher")}
    for k, v in values.items():
        unit, direction = units.get(k, ("ms", "lower"))
        m.add(k, v, unit, direction, "measured")
    return m


def test_too_fast_decode_is_flagged(flagship, cfg):
    bound = physics.bounds(flagship, cfg).decode_tokens_per_s_max
    m, findings = physics.check(
        measured(decode_tokens_per_s=bound * 1.5, ttft_ms=500.0), flagship, cfg
    )
    assert m["decode_tokens_per_s"].flags == ("implausible",)
    assert "above the maximum" in m["decode_tokens_per_s"].description
    assert m["ttft_ms"].flags == ()
    assert len(findings) == 1 and "decode_tokens_per_s" in findings[0]


def test_plausible_measurement_untouched(flagship, cfg):
    bound = physics.bounds(flagship, cfg).decode_tokens_per_s_max
    src = measured(
        decode_tokens_per_s=bound * 0.6, decode_step_ms=1e3 / (bound * 0.6), ttft_ms=900.0
    )
    m, findings = physics.check(src, flagship, cfg)
    assert findings == []
    assert all(x.flags == () for x in m)


def test_within_tolerance_not_flagged(flagship, cfg):
    bound = physics.bounds(flagship, cfg).decode_tokens_per_s_max
    _, findings = physics.check(measured(decode_tokens_per_s=bound * 1.01), flagship, cfg)
    assert findings == []


def test_too_fast_prefill_is_flagged(flagship, cfg):
    floor = physics.bounds(flagship, cfg).prefill_ms_min
    m, _ = physics.check(measured(ttft_ms=floor / 3, prefill_ms=floor / 3), flagship, cfg)
    assert m["ttft_ms"].flags == ("implausible",) and m["prefill_ms"].flags == ("implausible",)


def test_op_faster_than_its_compute_floor(flagship):
    # a 4096 x 4096 INT4 GEMM over 512 rows: 2*512*4096*4096 ops at 65.536 TOPS is 262 us
    ops = 2.0 * 512 * 4096 * 4096
    floor = physics.op_floor_s(ops, 4096 * 4096 * 0.5, "int4", flagship)
    assert floor == pytest.approx(ops / 65.536e12, rel=1e-12)
    assert physics.op_is_implausible(100e-6, ops, 4096 * 4096 * 0.5, "int4", flagship)
    assert not physics.op_is_implausible(400e-6, ops, 4096 * 4096 * 0.5, "int4", flagship)


def test_command_device_measurement_caught(flagship, cfg):
    """llama-bench output 10x too fast for a 1B INT4 model on the flagship's LPDDR5X."""
    cmd = " ".join(
        shlex.quote(s)
        for s in (
            sys.executable,
            str(FAKE / "benchmark.py"),
            "--format",
            "llama-bench",
            "--scale",
            "0.1",
        )
    )
    m = CommandDevice(cmd, "llama-bench", 30).run(cfg).metrics
    checked, findings = physics.check(m, flagship, cfg)
    assert m.value("decode_tokens_per_s") > 150
    assert "implausible" in checked["decode_tokens_per_s"].flags
    assert any("decode_tokens_per_s" in f for f in findings)
    # the backend does the same check itself when it knows the phone it runs on
    on_phone = CommandDevice(cmd, "llama-bench", 30, profile=flagship).run(cfg)
    assert on_phone.findings == tuple(findings)
    assert "implausible" in on_phone.metrics["decode_tokens_per_s"].flags


def test_cli_measure_flags_implausible(capsys):
    from harmony_ref.cli import main

    cmd = " ".join(
        shlex.quote(s)
        for s in (
            sys.executable,
            str(FAKE / "benchmark.py"),
            "--format",
            "llama-bench",
            "--scale",
            "0.1",
        )
    )
    assert (
        main(
            [
                "measure",
                "--command",
                cmd,
                "--format",
                "llama-bench",
                "--profile",
                "harmony-flagship",
                "--model",
                "llama-3.2-1b",
                "--policy",
                "int4-g32",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "IMPLAUSIBLE: decode_tokens_per_s" in out
