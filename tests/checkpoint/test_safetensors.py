"""checkpoint/safetensors.py: the one safetensors header parser, on files the library wrote and on
truncated or foreign bytes (every error names the file)."""

import numpy as np
import pytest
from safetensors.numpy import save

from harmony_ref.checkpoint.safetensors import SafetensorsError, mmap_tensors, read_header, split


def _blob():
    tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.arange(4, dtype=np.int8)}
    return tensors, save(tensors, metadata={"k": "v"})


def test_split_read_header_and_mmap_agree_with_the_library(tmp_path):
    tensors, blob = _blob()
    header, start, data = split(blob, "mem")
    assert header["__metadata__"] == {"k": "v"} and start + len(data) == len(blob)
    path = tmp_path / "t.safetensors"
    path.write_bytes(blob)
    assert read_header(path) == (header, start)
    for name, t in mmap_tensors(path).items():
        begin, end = header[name]["data_offsets"]
        assert np.array_equal(t, tensors[name]) and t.tobytes() == data[begin:end], name


@pytest.mark.parametrize(
    "cut, message", [(5, "not even a header length"), (20, "truncated inside the header")]
)
def test_truncated_files_say_where(tmp_path, cut, message):
    _, blob = _blob()
    path = tmp_path / "cut.safetensors"
    path.write_bytes(blob[:cut])
    calls = (
        lambda: split(blob[:cut], str(path)),
        lambda: read_header(path),
        lambda: mmap_tensors(path),
    )
    for call in calls:
        with pytest.raises(SafetensorsError, match=f"cut.safetensors: .*{message}"):
            call()


def test_foreign_and_corrupted_headers(tmp_path):
    with pytest.raises(SafetensorsError, match="x.toml: not a safetensors file"):
        split(b'name = "x"\ndefault = "int8"\n', "x.toml")
    bad = tmp_path / "broken.safetensors"
    bad.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(SafetensorsError, match="broken.safetensors: header is not valid JSON"):
        read_header(bad)
    with pytest.raises(SafetensorsError, match="list: not a safetensors file"):
        split(b"\x02\x00\x00\x00\x00\x00\x00\x00[]", "list")  # JSON, but not an object
    assert issubclass(SafetensorsError, ValueError)  # the CLI prints it as one line, exit 2
