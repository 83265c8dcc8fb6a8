"""Device profiles: the shipped TOMLs load, state sources, and bad files fail precisely."""

import dataclasses
import re
from importlib import resources
from pathlib import Path

import pytest

from harmony_ref.device.runtime import load_profile
from harmony_ref.device.soc import DeviceProfile, shipped_profiles
from harmony_ref.device.thermal_config import ThermalConfig

SHIPPED = ["harmony-flagship", "harmony-midrange", "harmony-lowend"]


def _text(name):
    return (resources.files("harmony_ref") / "device" / "profiles" / f"{name}.toml").read_text()


def test_shipped_profiles_load():
    assert set(SHIPPED) <= set(shipped_profiles())
    for name in SHIPPED:
        p = load_profile(name)
        assert isinstance(p, DeviceProfile) and p.name == name
        assert isinstance(p.thermal, ThermalConfig)
        assert p.source.endswith(f"{name}.toml")
        assert load_profile(p) is p


# What counts as naming a source: a document kind or a publisher the reader can look up.
SOURCE_WORDS = (
    "assumption",
    "issue",
    "source material",
    "jedec",
    "device tree",
    "docs",
    "hot chips",
    "trm",
    "optimization guide",
    "spec sheet",
    "datasheet",
    "product brief",
    "arxiv",
    "measured",
    "product page",
    "announcement",
    "teardown",
    "tech specs",
    "spec listing",
)
# The real SoCs (device profiles that name a default runtime) are held to the same rule.
SOCS = [
    "snapdragon-8-gen-3",
    "snapdragon-8-elite",
    "snapdragon-8-gen-2",
    "dimensity-9300",
    "kirin-9000e",
    "kirin-990-5g",
    "snapdragon-8-elite-gen-5",
    "dimensity-9400",
    "kirin-9020",
    "tensor-g4",
    "exynos-2500",
]
NUMERIC_FIELD = re.compile(r"^\w+ = [\d\[-]")


def _cited_comments(lines, i):
    """The inline comment of line i plus the nearest block of comment-only lines above it in the
    same paragraph: a derivation like `cpu_int8_gops = 688.0  # 64 x 10.75` cites the block
    comment that opens its group of fields."""
    out = [lines[i].partition("#")[2]]
    block = False
    for line in reversed(lines[:i]):
        if not line.strip() or line.startswith("["):
            break
        if line.lstrip().startswith("#"):
            out.append(line.partition("#")[2])
            block = True
        elif block:  # a field above the block: the block is over
            break
    return " ".join(out).lower()


def test_every_number_names_a_source_or_says_assumption():
    for name in SHIPPED + SOCS:
        lines = _text(name).splitlines()
        for i, line in enumerate(lines):
            if NUMERIC_FIELD.match(line):  # a numeric (or list) value
                assert line.partition("#")[2].strip(), f"{name}: no comment on: {line}"
                context = _cited_comments(lines, i)
                assert any(w in context for w in SOURCE_WORDS), (
                    f"{name}: no source or 'assumption' for: {line}"
                )


def test_source_check_catches_an_unsourced_number():
    lines = [
        "[memory]",
        'dram_type = "x"',
        "ram_gb = 12.0  # a nice round number",
        "# Arm A77 TRM: 32 flops/cycle",
        "cpu_fp16_gflops = 344.0  # 32 x 10.75",
    ]
    assert not any(w in _cited_comments(lines, 2) for w in SOURCE_WORDS)
    assert "trm" in _cited_comments(lines, 4)


def test_npu_int4_runs_at_twice_int8_and_lowend_falls_back_to_cpu():
    for name in ("harmony-flagship", "harmony-midrange"):
        c = load_profile(name).compute
        assert c.on_npu("int4") and c.cube_int4_tops == pytest.approx(2 * c.cube_int8_tops)
    low = load_profile("harmony-lowend").compute
    assert not any(low.on_npu(d) for d in ("fp16", "int8", "int4"))
    assert low.matmul_ops_per_s("int8") == pytest.approx(low.cpu_int8_gops * 1e9)


def test_issue_facts_in_the_profiles():
    flag = load_profile("harmony-flagship")
    assert flag.memory.dram_bandwidth_gbps == pytest.approx(8533e6 * 8 / 1e9, rel=1e-3)  # 68.3 GB/s
    assert flag.thermal.sustainable_power_w == 4.5  # HiSilicon device tree
    assert (
        load_profile("harmony-lowend").thermal.sustainable_power_w == 2.0
    )  # small phone (IPA docs)
    for name in SHIPPED:
        budget_gb = load_profile(name).memory.app_budget_bytes / 1e9
        assert 1.9 <= budget_gb <= 4.0  # "a phone leaves 2-4 GB to an app"


@pytest.fixture
def flagship_text():
    return _text("harmony-flagship")


def _write(tmp_path, text):
    path = tmp_path / "phone.toml"
    path.write_text(text)
    return path


def _expect(tmp_path, text, *fragments):
    path = _write(tmp_path, text)
    with pytest.raises(ValueError) as e:
        load_profile(path)
    msg = str(e.value)
    assert str(path) in msg, msg
    for frag in fragments:
        assert frag in msg, msg


def test_missing_field(tmp_path, flagship_text):
    text = re.sub(r"^dram_bandwidth_gbps = .*\n", "", flagship_text, flags=re.M)
    _expect(tmp_path, text, "missing field 'memory.dram_bandwidth_gbps'")


def test_negative_field(tmp_path, flagship_text):
    text = re.sub(
        r"^launch_overhead_us = .*$", "launch_overhead_us = -5.0", flagship_text, flags=re.M
    )
    _expect(tmp_path, text, "'runtime.launch_overhead_us'", "-5.0", ">= 0")


CALIBRATION = """
[calibration]
held_out_per_op_mape_pct = 7.5
n_fit = 20
n_held_out = 10
fitted_at = "2026-11-30T15:00:00+00:00"
"""


def test_calibration_section_optional_and_validated(tmp_path, flagship_text):
    # phones carry none; a profile whose runtime was calibrated on held-out runs carries that
    assert all(load_profile(n).calibration is None for n in SHIPPED + SOCS)
    cal = load_profile(_write(tmp_path, flagship_text + CALIBRATION)).calibration
    assert (
        cal.model_mape_pct[0] == 7.5
        and cal.e2e_mape_pct is None
        and "per-op" in cal.model_mape_pct[1]
    )
    with_e2e = CALIBRATION + "held_out_e2e_mape_pct = 11.0\nn_held_out_e2e = 2\n"
    cal = load_profile(_write(tmp_path, flagship_text + with_e2e)).calibration
    assert cal.model_mape_pct[0] == 11.0 and "end-to-end" in cal.model_mape_pct[1]
    _expect(
        tmp_path,
        flagship_text + CALIBRATION.replace("7.5", "-1.0"),
        "'calibration.held_out_per_op_mape_pct'",
        ">= 0",
    )
    _expect(
        tmp_path, flagship_text + CALIBRATION + "mape = 3.0\n", "unknown field 'calibration.mape'"
    )
    _expect(
        tmp_path,
        flagship_text + CALIBRATION.replace("n_fit = 20\n", ""),
        "missing field 'calibration.n_fit'",
    )


def test_unknown_field(tmp_path, flagship_text):
    text = flagship_text.replace("[memory]\n", "[memory]\ndram_bandwith_gbps = 12.0\n")
    _expect(tmp_path, text, "unknown field 'memory.dram_bandwith_gbps'", "12.0")


def test_unknown_field_names_the_closest_known_one(tmp_path, flagship_text):
    text = flagship_text.replace("[memory]\n", "[memory]\ndram_bandwith_gbps = 12.0\n")
    _expect(tmp_path, text, "did you mean 'dram_bandwidth_gbps'")


@pytest.mark.parametrize(
    "field, value",
    [
        ("dram_bandwidth_gbps", "inf"),
        ("dram_bandwidth_gbps", "nan"),
        ("npu_init_ms", "-inf"),
        ("ambient_c", "nan"),
        ("freq_steps", "[1.0, nan]"),
    ],
)
def test_non_finite_numbers_are_refused_where_they_are_read(tmp_path, flagship_text, field, value):
    text = re.sub(rf"^{field} = .*$", f"{field} = {value}", flagship_text, flags=re.M)
    _expect(tmp_path, text, f".{field}' = ", "must be a finite number")


def test_wrong_type(tmp_path, flagship_text):
    text = re.sub(r"^ram_gb = .*$", 'ram_gb = "twelve"', flagship_text, flags=re.M)
    _expect(tmp_path, text, "'memory.ram_gb'", "'twelve'", "expected float")


def test_efficiency_above_one(tmp_path, flagship_text):
    text = re.sub(r"^memory_efficiency = .*$", "memory_efficiency = 1.5", flagship_text, flags=re.M)
    _expect(tmp_path, text, "'memory.memory_efficiency'", "1.5", "<= 1.0")


def test_unreadable_toml(tmp_path, flagship_text):
    _expect(tmp_path, flagship_text + "\nthis is = = not toml\n", "not valid TOML")


def test_thermal_cross_field_error_names_the_file(tmp_path, flagship_text):
    text = re.sub(r"^freq_steps = .*$", "freq_steps = [0.9, 0.5]", flagship_text, flags=re.M)
    _expect(tmp_path, text, "thermal.freq_steps", "0.9")


def test_missing_file_and_unknown_name():
    with pytest.raises(ValueError, match="does not exist"):
        load_profile("/nonexistent/phone.toml")
    with pytest.raises(ValueError, match="unknown profile 'harmony-pro'.*`harmony-ref profiles`"):
        load_profile("harmony-pro")


def test_a_new_phone_is_a_data_file(tmp_path, flagship_text):
    text = re.sub(r"^name = .*$", 'name = "my-phone"', flagship_text, count=1, flags=re.M)
    text = re.sub(r"^dram_bandwidth_gbps = .*$", "dram_bandwidth_gbps = 100.0", text, flags=re.M)
    p = load_profile(_write(tmp_path, text))
    assert p.name == "my-phone" and p.memory.dram_bandwidth_gbps == 100.0
    flagship = load_profile("harmony-flagship")
    assert p != flagship
    assert (
        dataclasses.replace(p, name=flagship.name, memory=flagship.memory) == flagship
    )  # `source` not compared


def test_a_profile_file_is_parsed_once_per_version(tmp_path):
    """load_soc caches a profile TOML per version of the file (a fit prices thousands of points
    on one): the same object while the file stands, the new numbers once it is rewritten."""
    from harmony_ref.device.profiles import __path__ as folders
    from harmony_ref.device.soc import load_soc

    text = (Path(folders[0]) / "dimensity-9300.toml").read_text()
    path = tmp_path / "mine.toml"
    path.write_text(text)
    first = load_soc(str(path))
    assert load_soc(str(path)) is first and first.source == str(path)
    path.write_text(text.replace('name = "dimensity-9300"', 'name = "mine-rewritten"', 1))
    assert load_soc(str(path)).name == "mine-rewritten"
