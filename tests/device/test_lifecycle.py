"""Model lifecycle: the entry at which create-without-destroy exhausts NPU memory, worked by
hand; the three strategies' memory timelines and latencies; the command and its plot."""

import dataclasses
import json
import math

import pytest

from harmony_ref.cli import main
from harmony_ref.config import RunConfig
from harmony_ref.device.coldstart import breakdown
from harmony_ref.device.lifecycle import instance_mb, leak_fail_entry, simulate_lifecycle
from harmony_ref.device.runtime import load_profile

CFG = RunConfig.from_names(model="qwen2.5-0.5b")


def _with_budget(mb):
    p = load_profile("harmony-flagship")
    return dataclasses.replace(p, npu=dataclasses.replace(p.npu, memory_mb=mb))


def test_the_leak_fails_at_the_entry_worked_by_hand():
    one = instance_mb(load_profile("harmony-flagship"), CFG)
    prof = _with_budget(3.5 * one)  # room for 3 instances, not 4: entry 4 needs 4 x one
    leak = simulate_lifecycle(prof, CFG, "leak", entries=6)
    assert leak.fail_entry == 4 == leak_fail_entry(3.5 * one, one)
    assert [e.status for e in leak.entries] == ["ok"] * 3 + ["failed"] * 3
    assert [e.npu_mb_closed for e in leak.entries] == pytest.approx(
        [one, 2 * one, 3 * one] + [3 * one] * 3
    )
    assert [e.enter_ms > 0 for e in leak.entries] == [True] * 3 + [False] * 3
    # The shipped flagship: npu.memory_mb = 3072, one qwen2.5-0.5b int4-g128 instance = 551.7 MB
    # (weights + KV cache at 2048 + activations + 256 MB workspace): floor(3072 / 551.7) + 1 = 6.
    shipped = simulate_lifecycle(load_profile("harmony-flagship"), CFG, "leak", entries=10)
    assert (
        one == pytest.approx(551.7, abs=0.1)
        and shipped.fail_entry == math.floor(3072 / one) + 1 == 6
    )


def test_destroy_and_resident_never_fail_and_cost_what_coldstart_says():
    prof = _with_budget(1.5 * instance_mb(load_profile("harmony-flagship"), CFG))
    rows = {r["strategy"]: r["total_ms"] for r in breakdown(prof, CFG) if r["loader"] == "read"}
    d = simulate_lifecycle(prof, CFG, "destroy", entries=5)
    r = simulate_lifecycle(prof, CFG, "resident", entries=5)
    assert d.fail_entry is None and r.fail_entry is None
    assert [e.enter_ms for e in d.entries] == pytest.approx([rows["cold"]] * 5)
    assert [e.enter_ms for e in r.entries] == pytest.approx(
        [rows["cold"]] + [rows["preload_warmup"]] * 4
    )
    assert all(e.npu_mb_closed == 0 for e in d.entries)
    assert all(e.npu_mb_closed == r.instance_mb for e in r.entries)
    assert r.summary()["total_enter_ms"] < d.summary()["total_enter_ms"]


def test_an_instance_larger_than_the_budget_fails_at_once():
    prof = _with_budget(100.0)
    for s in ("destroy", "resident", "leak"):
        assert simulate_lifecycle(prof, CFG, s, entries=3).fail_entry == 1
    with pytest.raises(ValueError, match="strategy = 'forget'"):
        simulate_lifecycle(prof, CFG, "forget")
    with pytest.raises(ValueError, match="entries = 0"):
        simulate_lifecycle(prof, CFG, "leak", entries=0)


def test_lifecycle_metrics_in_the_prediction():
    from harmony_ref.backends.simulated import SimulatedDevice

    m = SimulatedDevice().predict(CFG)
    assert m.value("lifecycle_leak_fail_entry") == 6
    assert m.value("lifecycle_instance_npu_mb") == pytest.approx(
        instance_mb(load_profile("harmony-flagship"), CFG)
    )
    assert m.value("lifecycle_resident_reenter_ms") < m.value("lifecycle_destroy_enter_ms")


def test_lifecycle_cli_json_and_plot(capsys, tmp_path):
    png = tmp_path / "lc.png"
    assert (
        main(
            ["lifecycle", "--model", "qwen2.5-0.5b", "--entries", "8", "--json", "--plot", str(png)]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    by = {s["strategy"]: s for s in out["strategies"]}
    assert by["leak"]["fail_entry"] == 6 and by["destroy"]["fail_entry"] is None
    assert len(by["resident"]["timeline"]) == 8
    from PIL import Image

    with Image.open(png) as im:
        assert im.size[0] == 1400
    assert main(["lifecycle", "--strategy", "leak", "--entries", "3"]) == 0
    assert "leak" in capsys.readouterr().out
    assert main(["lifecycle", "--entries", "0"]) == 2
    assert main(["lifecycle", "--plot", str(tmp_path / "x.jpg")]) == 2
    assert "--plot" in capsys.readouterr().err
