"""The safetensors container, parsed in one place: an 8-byte little-endian header length, a JSON
header (tensor name -> dtype, shape, data_offsets; optional `__metadata__` of strings), then the
data section.

    header, start, data = split(blob, "m.safetensors")     # a file already in memory
    header, start = read_header(path)                      # only the header, from disk
    tensors = mmap_tensors(path)                           # every tensor as a read-only np.memmap

The `safetensors` package writes and loads files; this module parses them where we need more than
it says: precise errors for a truncated or foreign file (the library only says "invalid header"),
the byte ranges an artifact's manifest is checked against, and zero-copy memmap views for the
cold-start measurement. Every failure is a SafetensorsError (a ValueError) naming the file.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

HEADER_LEN_BYTES = 8  # little-endian u64, then the JSON header
DTYPES = {"F32": np.float32, "F16": np.float16, "I8": np.int8, "U8": np.uint8, "I64": np.int64}


class SafetensorsError(ValueError):
    """Not a readable safetensors file (truncated, corrupted, or something else entirely)."""


def _header(prefix: bytes, header_bytes: bytes, file_len: int, source: str) -> tuple[dict, int]:
    """(header dict, its length) from the first 8 bytes and the bytes after them."""
    if len(prefix) < HEADER_LEN_BYTES:
        raise SafetensorsError(f"{source}: truncated: {file_len} bytes, not even a header length")
    (n,) = struct.unpack("<Q", prefix[:HEADER_LEN_BYTES])
    if header_bytes[:1] not in (b"{", b""):  # the JSON header follows the length
        raise SafetensorsError(
            f"{source}: not a safetensors file (no JSON header after the 8-byte length)"
        )
    if HEADER_LEN_BYTES + n > file_len:
        raise SafetensorsError(
            f"{source}: truncated inside the header: it declares {n} bytes, "
            f"the file has {file_len - HEADER_LEN_BYTES} after the length field"
        )
    try:
        header = json.loads(header_bytes[:n])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{source}: header is not valid JSON ({e}): corrupted") from e
    return header, n  # a dict: the JSON starts with "{"


def split(blob: bytes, source: str) -> tuple[dict, int, bytes]:
    """(header dict, offset where the data starts, data section) of a whole file in memory."""
    header, n = _header(blob[:HEADER_LEN_BYTES], blob[HEADER_LEN_BYTES:], len(blob), source)
    return header, HEADER_LEN_BYTES + n, blob[HEADER_LEN_BYTES + n :]


def read_header(path: str | Path) -> tuple[dict, int]:
    """(header dict, offset where the data starts), reading only the header from disk."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        prefix = f.read(HEADER_LEN_BYTES)
        n = struct.unpack("<Q", prefix)[0] if len(prefix) == HEADER_LEN_BYTES else 0
        rest = f.read(min(n, max(size - HEADER_LEN_BYTES, 0)))  # never more than the file has
        header, n = _header(prefix, rest, size, str(path))
    return header, HEADER_LEN_BYTES + n


def mmap_tensors(path: str | Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file as a read-only np.memmap view (zero copy)."""
    path = Path(path)
    header, start = read_header(path)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = DTYPES.get(info["dtype"])
        if dtype is None:
            raise SafetensorsError(
                f"{path}: tensor {name!r} has dtype {info['dtype']!r}, "
                f"expected one of {sorted(DTYPES)}"
            )
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        out[name] = np.memmap(path, dtype=dtype, mode="r", offset=start + begin, shape=shape)
        if out[name].nbytes != end - begin:
            raise SafetensorsError(
                f"{path}: tensor {name!r}: shape {shape} does not match its byte range"
            )
    return out
