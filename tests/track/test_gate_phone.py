"""The gate on the issue-14 record metrics: a profile change that moves an op off the NPU, slows
the NPU <-> CPU copy, shrinks the NPU memory pool or costs more per thread barrier fails the gate
on the metric that says so (exact rules, the shipped tolerances)."""

import dataclasses

import pytest

from harmony_ref.backends.simulated import SimulatedDevice
from harmony_ref.config import RunConfig
from harmony_ref.device.runtime import load_profile
from harmony_ref.track import gate
from harmony_ref.track.record import Record, collect_provenance

PROV = collect_provenance()


def _record(profile, config) -> Record:
    m = SimulatedDevice(profile).predict(config)
    return Record(
        config.to_dict(),
        m,
        PROV,
        {"predicted": {"status": "ok", "detail": "", "metrics": m.names()}},
    )


def _regressions(base, cur):
    report = gate.compare(base, cur, gate.load_tolerances())
    return {r.metric for r in report.rows if r.status == gate.REGRESSION}, report.exit_code


FLAG = load_profile("harmony-flagship")


@pytest.mark.parametrize(
    "change, model, expected",
    [
        (
            lambda p: dataclasses.replace(p, npu=dataclasses.replace(p.npu, transfer_gbps=10.0)),
            "gemma-2b",
            {"npu_fallback_ms_per_token"},
        ),
        (
            lambda p: dataclasses.replace(
                p, npu=dataclasses.replace(p.npu, ops=tuple(o for o in p.npu.ops if o != "rope"))
            ),
            "qwen2.5-0.5b",
            {"npu_fallback_ops", "npu_fallback_ms_per_token"},
        ),
        (
            lambda p: dataclasses.replace(p, npu=dataclasses.replace(p.npu, memory_mb=1024.0)),
            "qwen2.5-0.5b",
            {"lifecycle_leak_fail_entry"},
        ),
        (
            lambda p: dataclasses.replace(
                p, cpu=dataclasses.replace(p.cpu, sync_us_per_thread=2.0)
            ),
            "qwen2.5-0.5b",
            {"cpu_decode_tokens_per_s"},
        ),
    ],
)
def test_phone_metric_regressions_fail_the_gate(change, model, expected):
    cfg = RunConfig.from_names(model=model)
    base, cur = _record(FLAG, cfg), _record(change(FLAG), cfg)
    got, code = _regressions(base, cur)
    assert expected <= got and code == 1
    assert _regressions(base, _record(FLAG, cfg)) == (set(), 0)


def test_prefix_saving_is_gated():
    cfg = RunConfig.from_names(model="qwen2.5-0.5b", prefix_tokens=384)
    slower = dataclasses.replace(
        FLAG, compute=dataclasses.replace(FLAG.compute, compute_efficiency=0.25)
    )
    got, _ = _regressions(_record(FLAG, cfg), _record(slower, cfg))
    assert "ttft_ms" in got and "prefix_ttft_saved_ms" not in got  # slower compute: more saved
    got, _ = _regressions(_record(slower, cfg), _record(FLAG, cfg))
    assert "prefix_ttft_saved_ms" in got
