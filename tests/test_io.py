"""harmony_ref._io: the one atomic writer every result, artifact and cache goes through."""

import threading

import pytest

from harmony_ref._io import write_bytes_atomic, write_text_atomic


def test_bytes_and_text_round_trip(tmp_path):
    write_bytes_atomic(tmp_path / "a.bin", b"\x00\xff" * 10)
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\xff" * 10
    write_text_atomic(tmp_path / "sub" / "b.txt", "grüß dich\n")  # makes the folder, UTF-8
    assert (tmp_path / "sub" / "b.txt").read_text(encoding="utf-8") == "grüß dich\n"


def test_overwrite_false_refuses_and_keeps_the_old_file(tmp_path):
    target = tmp_path / "baseline.json"
    write_text_atomic(target, "old")
    with pytest.raises(FileExistsError):
        write_text_atomic(target, "new", overwrite=False)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["baseline.json"]  # no temp file left


def test_concurrent_writers_to_one_name_never_share_a_temp_file(tmp_path):
    # Two first-time downloads extracting the same asset at once: each must write its own
    # temporary file, and the target must end up whole.
    target = tmp_path / "model.safetensors"
    payloads = [bytes([i]) * 200_000 for i in range(8)]
    threads = [threading.Thread(target=write_bytes_atomic, args=(target, p)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert target.read_bytes() in payloads
    assert [p.name for p in tmp_path.iterdir()] == ["model.safetensors"]
