"""lab/device_parsers.py on real-format fixtures (tests/fixtures/device_outputs/README.md
says where each format comes from): attached-device lists, properties, hidumper, VmHWM, sysfs."""

from pathlib import Path

import pytest

from harmony_ref.lab._parse import ParseError
from harmony_ref.lab.device_parsers import (
    adb_failure,
    hdc_failure,
    millidegrees_c,
    parse_adb_devices,
    parse_getprop,
    parse_grep_h,
    parse_hdc_targets,
    parse_hidumper_mem,
    parse_param_get,
    parse_uptime_s,
    parse_vmhwm_kb,
)

FIX = Path(__file__).parents[1] / "fixtures" / "device_outputs"


def text(name):
    return (FIX / name).read_text()


def test_hdc_list_targets_plain_verbose_empty_and_failure():
    plain = parse_hdc_targets(text("hdc_list_targets.txt"))
    assert [(d.serial, d.state, d.usable) for d in plain] == [
        ("FMR0223C13000649", "Connected", True),
        ("192.168.3.17:5555", "Unauthorized", False),
    ]
    verbose = parse_hdc_targets(text("hdc_list_targets_v.txt"))
    assert [(d.serial, d.state, d.info["connection"]) for d in verbose] == [
        ("FMR0223C13000649", "Connected", "USB"),
        ("192.168.3.17:5555", "Offline", "TCP"),
    ]
    assert not verbose[1].usable
    assert parse_hdc_targets(text("hdc_list_targets_empty.txt")) == []
    gone = text("hdc_device_gone.txt")
    assert hdc_failure(gone) == "[Fail][E001005] Device not found or connected"
    with pytest.raises(ParseError, match="E001005"):
        parse_hdc_targets(gone)


def test_adb_devices_short_and_long():
    short = parse_adb_devices(text("adb_devices.txt"))
    assert [(d.serial, d.state, d.usable) for d in short] == [
        ("38011FDJH0008X", "device", True),
        ("emulator-5554", "offline", False),
    ]
    long = parse_adb_devices(text("adb_devices_l.txt"))
    assert [d.serial for d in long] == ["38011FDJH0008X", "emulator-5554", "R5CT40XXXXX"]
    assert long[0].info == {
        "usb": "1-1.4",
        "product": "shiba",
        "model": "Pixel_8",
        "device": "shiba",
        "transport_id": "3",
    }
    assert long[2].state == "unauthorized" and not long[2].usable
    assert adb_failure("adb: device '38011FDJH0008X' not found\n")
    assert adb_failure("error: no devices/emulators found")
    assert adb_failure("List of devices attached\n") is None


def test_getprop_and_param_get():
    props = parse_getprop(text("getprop.txt"))
    assert props["ro.product.model"] == "Pixel 8"
    assert props["ro.soc.model"] == "Tensor G3"
    assert props["ro.build.fingerprint"].endswith("release-keys")
    params = parse_param_get(text("param_get.txt"))  # \r\n line ends, as the tool prints
    assert params["const.product.model"] == "ALN-AL00"
    assert params["const.product.software.version"] == "ALN-AL00 5.0.0.120(SP6C00E120R4P5)"
    assert params["const.ohos.apiversion"] == "12"


def test_hidumper_mem_total_row():
    got = parse_hidumper_mem(text("hidumper_mem.txt"))
    assert got["pss_total_kb"] == 829948  # the sum of the class rows' Pss in the fixture
    assert got["private_dirty_kb"] == 820184
    assert (got["heap_size_kb"], got["heap_alloc_kb"], got["heap_free_kb"]) == (
        823296,
        811872,
        11424,
    )
    with pytest.raises(ParseError, match="Total"):
        parse_hidumper_mem(text("hidumper_mem.txt").replace("Total  ", "Totl   "))
    with pytest.raises(ParseError, match="Pss"):
        parse_hidumper_mem("hidumper: process 12 not exist\n")


def test_vmhwm_uptime_and_sysfs_lines():
    assert parse_vmhwm_kb(text("proc_status.txt")) == 931544
    assert parse_vmhwm_kb("/proc/12/status:VmHWM:\t  1234 kB\n") == 1234  # as grep -H prints it
    with pytest.raises(ParseError, match="VmHWM"):
        parse_vmhwm_kb("")
    assert parse_uptime_s("35642.17 281003.55\n") == pytest.approx(35642.17)
    with pytest.raises(ParseError):
        parse_uptime_s("cat: /proc/uptime: Permission denied")
    got = parse_grep_h(
        "/sys/class/thermal/thermal_zone0/temp:41250\n"
        "/sys/devices/system/cpu/cpu7/cpufreq/scaling_cur_freq:3130000\n"
    )
    assert millidegrees_c(got["/sys/class/thermal/thermal_zone0/temp"]) == 41.25
    assert got["/sys/devices/system/cpu/cpu7/cpufreq/scaling_cur_freq"] == "3130000"
