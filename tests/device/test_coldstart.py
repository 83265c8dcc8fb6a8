"""Cold-start model: ordering of strategies, where the time goes, exact metrics."""

import dataclasses

import pytest

from harmony_ref.config import RunConfig
from harmony_ref.device.coldstart import (
    LOADERS,
    STEPS,
    ColdStartInputs,
    breakdown,
    coldstart_inputs,
    coldstart_metrics,
    step_times_ms,
)
from harmony_ref.device.memory import weights_bytes
from harmony_ref.device.runtime import load_profile
from harmony_ref.device.soc import shipped_profiles
from harmony_ref.model.spec import list_specs
from harmony_ref.units import GB, MS_PER_S

CONFIG = RunConfig.from_names(model="llama-3.2-3b", policy="int4-g128")


@pytest.mark.parametrize("profile", shipped_profiles())
@pytest.mark.parametrize("model", list_specs())
@pytest.mark.parametrize("policy", ["int4-g128", "int8", "mixed"])
def test_cold_ge_preload_ge_warmup_for_every_profile(profile, model, policy):
    prof = load_profile(profile)
    # every model, the decoder recipe `mixed` on MiniLM too (deliberately cross-family)
    config = RunConfig.from_names(model=model, policy=policy, allow_unmatched=True)
    rows = breakdown(prof, config)
    for loader in LOADERS:
        t = {r["strategy"]: r["total_ms"] for r in rows if r["loader"] == loader}
        assert t["cold"] >= t["preload"] >= t["preload_warmup"] > 0, (profile, loader, t)
    m = coldstart_metrics(prof, config)
    assert (
        m.value("coldstart_cold_ms")
        >= m.value("coldstart_preload_ms")
        >= m.value("coldstart_preload_warmup_ms")
    )
    assert all(x.kind == "exact" and x.direction == "lower" for x in m)


def test_storage_read_is_file_size_over_bandwidth():
    prof = load_profile("harmony-flagship")
    inp = coldstart_inputs(prof, CONFIG)
    assert inp.file_bytes == weights_bytes(CONFIG.spec, CONFIG.policy)
    t = step_times_ms(prof, inp)
    assert t["storage_read"] == pytest.approx(
        inp.file_bytes / (prof.runtime.storage_read_gbps * GB) * MS_PER_S
    )
    assert t["npu_init"] == prof.runtime.npu_init_ms
    assert t["graph_parse"] == pytest.approx(
        prof.runtime.graph_parse_ms_per_mb * inp.file_bytes / 1e6
    )


def test_rows_sum_their_steps_and_loaders_differ_where_they_should():
    rows = breakdown(load_profile("harmony-flagship"), CONFIG)
    for r in rows:
        assert r["total_ms"] == pytest.approx(sum(r[f"{s}_ms"] for s in STEPS))
        assert r["heap_copy_ms"] == 0 or r["loader"] == "read"
        assert r["page_fault_ms"] == 0 or r["loader"] == "mmap"
    by = {(r["strategy"], r["loader"]): r for r in rows}
    # mmap + preload still reads the file on the first inference; read + preload does not.
    assert by[("preload", "mmap")]["total_ms"] > by[("preload", "read")]["total_ms"]
    assert by[("preload_warmup", "mmap")]["total_ms"] == by[("preload_warmup", "read")]["total_ms"]


def test_faster_storage_only_shrinks_cold():
    prof = load_profile("harmony-midrange")
    fast = dataclasses.replace(
        prof, runtime=dataclasses.replace(prof.runtime, storage_read_gbps=100.0)
    )
    slow_m, fast_m = coldstart_metrics(prof, CONFIG), coldstart_metrics(fast, CONFIG)
    assert fast_m.value("coldstart_cold_ms") < slow_m.value("coldstart_cold_ms")
    assert fast_m.value("coldstart_preload_ms") == slow_m.value("coldstart_preload_ms")


def test_deterministic_and_rejects_bad_loader():
    prof = load_profile("harmony-flagship")
    assert coldstart_metrics(prof, CONFIG).to_dict() == coldstart_metrics(prof, CONFIG).to_dict()
    with pytest.raises(ValueError, match="loader"):
        coldstart_metrics(prof, CONFIG, loader="dma")


def test_zero_inputs_give_fixed_costs_only():
    prof = load_profile("harmony-flagship")
    t = step_times_ms(prof, ColdStartInputs(0.0, 0.0, 0, 0.0))
    assert {k: v for k, v in t.items() if v} == {"npu_init": prof.runtime.npu_init_ms}
