"""What throttling is (lab/telemetry.py): the phone capping its cores, not a core that is
idle. Against the fake phone with a benchmark start window (the process alive, the big cores
parked while the model loads): the start window is never throttling, a real cap (the thermal
governor lowering scaling_max_freq as the phone heats) is; Android's thermal status is the first
signal; a core that stays slow while loaded counts only over a sustained window. The rule itself
on hand-made samples."""

import pytest

from harmony_ref.lab.session import DeviceSession
from harmony_ref.lab.session_spec import load_session
from harmony_ref.lab.telemetry import Sample, Telemetry
from tests.lab.test_session import (  # noqa: F401
    adb_phone,
    fresh,
    hdc_phone,
    llama_bench,
    measured_record,
    phones,
)


def command(spec):
    work = spec.device.work_dir
    return f"{work}/llama-bench -m {work}/model.gguf -p 64 -n 1024 -r 1 -o json"


def parked_while_running(row, cpu=4, top_mhz=None):
    """The during-the-run samples in which the process was loading: big core parked, not busy."""
    s = row["samples"]
    return [
        i
        for i, ph in enumerate(s["phase"])
        if ph == "during" and s[f"cpu{cpu}_mhz"][i] < 0.5 * top_mhz and s[f"cpu{cpu}_busy"][i] == 0
    ]


@pytest.mark.parametrize("load_s", [0.4, 3.0])
def test_the_start_window_is_not_throttling(hdc_phone, tmp_path, capsys, load_s):  # noqa: F811
    fresh(hdc_phone, tmp_path, load_s=load_s, benchmark={"repeats": 3})
    rec = measured_record(tmp_path / "phone.toml", tmp_path / "runs", capsys)
    block = rec["parts"]["session"]["session"]
    top = block["max_freq_mhz"]["4"]
    rows = block["telemetry"]
    assert [r["throttled"] for r in rows] == [False] * 3
    # the start window was sampled: the process alive, cpu4 parked at 30 % and idle
    assert sum(len(parked_while_running(r, 4, top)) for r in rows) >= 1


def test_a_real_cap_after_the_start_window_is_throttling(hdc_phone, tmp_path):  # noqa: F811
    spec = fresh(
        hdc_phone,
        tmp_path,
        load_s=3.0,
        faults={"cap_from_run": 3, "cap_fraction": 0.6},
        benchmark={"repeats": 3, "min_valid_repeats": 1},
    )
    rows = DeviceSession(spec).run(command(spec), llama_bench).to_record()["telemetry"]
    assert [r["throttled"] for r in rows] == [False, False, True], [r["reasons"] for r in rows]
    assert any("cpu4 capped at 1.52 of 2.54 GHz (60%)" in r for r in rows[-1]["reasons"])


def test_android_thermal_status_is_read_and_marks_a_hot_repeat(adb_phone, tmp_path):  # noqa: F811
    cool = fresh(adb_phone, tmp_path / "cool", benchmark={"repeats": 1})
    row = DeviceSession(cool).run(command(cool), llama_bench).to_record()["telemetry"][0]
    assert row["throttled"] is False
    assert set(row["samples"]["thermal_status"]) == {0}  # dumpsys thermalservice, every read
    hot = fresh(
        adb_phone,
        tmp_path / "hot",
        die_c=66.0,
        skin_c=44.0,
        benchmark={"repeats": 1, "min_valid_repeats": 1},
        cooldown={"enabled": False},
    )
    row = DeviceSession(hot).run(command(hot), llama_bench).to_record()["telemetry"][0]
    assert row["throttled"] is True
    assert any(r.startswith("Android thermal status") for r in row["reasons"]), row["reasons"]


def test_cooldown_waits_for_android_thermal_status_none(adb_phone, tmp_path):  # noqa: F811
    spec = fresh(
        adb_phone,
        tmp_path,
        die_c=70.0,
        skin_c=44.0,
        benchmark={"repeats": 2, "min_valid_repeats": 1},
        cooldown={"threshold_c": 100.0, "check_interval_s": 20.0},  # the zone alone would pass
    )
    first, second = DeviceSession(spec).run(command(spec), llama_bench).to_record()["telemetry"]
    assert first["samples"]["thermal_status"][-1] > 0  # the hot phone's first run ends capped
    assert second["cooldown_s"] > 0 and second["samples"]["thermal_status"][0] == 0


def test_a_core_slow_while_loaded_counts_only_when_sustained(hdc_phone, tmp_path):  # noqa: F811
    def reasons(sustain_s, where):
        spec = fresh(
            hdc_phone,
            tmp_path / where,
            loaded_freq_fraction=0.5,
            benchmark={"repeats": 1, "min_valid_repeats": 1},
            cooldown={"enabled": False},
            throttle={"sustain_s": sustain_s},
        )
        return (
            DeviceSession(spec)
            .run(command(spec), llama_bench)
            .to_record()["telemetry"][0]["reasons"]
        )

    assert any("while loaded for" in r for r in reasons(0.0, "any"))
    assert reasons(10_000.0, "long") == []  # never that long: one window is not throttling


# --- the rule on hand-made samples ---------------------------------------------------------------

TOP = 2_540_000  # kHz


def telemetry(tmp_path, hdc_phone, **throttle):  # noqa: F811
    spec = load_session(
        hdc_phone.session_file(tmp_path / "phone.toml", throttle={"sustain_s": 5.0, **throttle})
    )
    t = Telemetry(None, spec.telemetry, spec.throttle, "/w", "none")
    t.max_khz = {4: TOP, 7: TOP}
    return t


def sample(t, phase="during", share=1.0, khz=TOP, cap=TOP, status=None, busy0=[0]):  # noqa: B006
    busy0[0] += int(share * 100)
    return Sample(
        phase,
        t,
        cur_khz={4: khz, 7: khz},
        cap_khz={4: cap, 7: cap},
        running=True if phase == "during" else None,
        ticks={4: (busy0[0], int(t * 100)), 7: (busy0[0], int(t * 100))},
        thermal_status=status,
    )


def run(*during, start=100.0):
    out = [sample(start, "before", share=0.0)]
    out += [sample(start + 1 + i, **kw) for i, kw in enumerate(during)]
    return out + [sample(start + 2 + len(during), "after", share=0.0)]


def test_the_rule_on_samples(tmp_path, hdc_phone):  # noqa: F811
    tel = telemetry(tmp_path, hdc_phone)
    parked = TOP * 0.3
    # one low sample while loaded: a single reading is not a sustained window
    assert not tel.verdict(run({"khz": parked}, {}, {})).throttled
    # parked for 8 s but idle (loading its model): not loaded, not throttled
    assert not tel.verdict(run(*[{"khz": parked, "share": 0.0}] * 8, {})).throttled
    # low and loaded for 6 s: throttled, naming the core and the span
    v = tel.verdict(run(*[{"khz": parked}] * 7))
    assert v.throttled and any("cpu4 stayed at or below 0.76" in r for r in v.reasons)
    assert any("while loaded for 6.0 s" in r for r in v.reasons)
    # a cap below the fraction: throttled at once
    v = tel.verdict(run({"cap": TOP * 0.6}))
    assert v.throttled and any("cpu7 capped at 1.52" in r for r in v.reasons)
    # Android's status above NONE: throttled at once, even at full frequency
    v = tel.verdict(run({"status": 2}))
    assert v.reasons == ("Android thermal status 2 (MODERATE) > 0 at t=101.0 s (during)",)
    assert not tel.verdict(run({"status": 0}, {}, {})).throttled
