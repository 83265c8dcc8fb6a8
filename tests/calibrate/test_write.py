"""The one profile writer (calibrate/write.py toml_table, toml_value): sections and keys checked
against the schema dataclasses before anything is written, values spelt one way."""

from __future__ import annotations

import pytest

from harmony_ref._schema import section_class
from harmony_ref._toml import loads
from harmony_ref.calibrate.write import toml_table, toml_value
from harmony_ref.device.runtime import RuntimeProfile
from harmony_ref.device.soc import CpuCluster, DeviceProfile, MemorySpec


def test_section_class_walks_the_schema():
    assert section_class(DeviceProfile, "") is DeviceProfile
    assert section_class(DeviceProfile, "memory") is MemorySpec
    assert section_class(DeviceProfile, "cpu.clusters") is CpuCluster  # optional, then an array
    with pytest.raises(
        ValueError, match=r"\[memory.ram_gb\]: 'ram_gb' is not a table of MemorySpec"
    ):
        section_class(DeviceProfile, "memory.ram_gb")
    with pytest.raises(ValueError, match="'memroy' is not a table of DeviceProfile"):
        section_class(DeviceProfile, "memroy")


def test_toml_table_writes_in_order_and_refuses_what_the_loader_would():
    text = toml_table("memory", [("ram_gb", 8.0, "measured"), ("dram_type", 'a "b"', "")])
    assert text == '[memory]\nram_gb = 8.0  # measured\ndram_type = "a \\"b\\""'
    assert loads(text, "test") == {"memory": {"ram_gb": 8.0, "dram_type": 'a "b"'}}
    assert toml_table("[cpu.clusters]", [("cores", 2, "")]) == "[[cpu.clusters]]\ncores = 2"
    with pytest.raises(ValueError, match=r"\[memory\] ram_mb = 8.0: not a field of MemorySpec"):
        toml_table("memory", [("ram_mb", 8.0, "")])
    with pytest.raises(ValueError, match="not a field of RuntimeProfile"):
        toml_table("", [("soc", "x", "")], schema=RuntimeProfile)


@pytest.mark.parametrize(
    "value,digits,text",
    [
        (True, None, "true"),
        (3, None, "3"),
        (0.1 + 0.2, None, "0.30000000000000004"),
        (0.1 + 0.2, 6, "0.3"),
        (1234567.0, 6, "1234570.0"),
        ([1, 2.5, "x"], None, '[1, 2.5, "x"]'),
        ("back\\slash", None, '"back\\\\slash"'),
    ],
)
def test_toml_value_one_spelling(value, digits, text):
    assert toml_value(value, digits) == text
