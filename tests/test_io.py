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


# --- StagedOutputs / write_checked: several outputs, all or nothing, the previous ones kept ---


def _fail_on(monkeypatch, name):
    """os.replace fails (EISDIR, as onto a directory) when its target is called `name`."""
    import os

    real = os.replace

    def replace(src, dst, *a, **k):
        if os.path.basename(dst) == name:
            raise IsADirectoryError(21, "Is a directory", str(dst))
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", replace)


def _tree(d):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_staged_outputs_land_together(tmp_path):
    from harmony_ref._io import StagedOutputs

    (tmp_path / "a.gguf").write_bytes(b"old a")
    with StagedOutputs() as staged:
        staged.stage(tmp_path / "a.gguf").write_bytes(b"new a")
        staged.stage_text(tmp_path / "sub" / "a.json", "new m")
        assert (tmp_path / "a.gguf").read_bytes() == b"old a"  # nothing moved before commit
        staged.commit()
    assert (tmp_path / "a.gguf").read_bytes() == b"new a"
    assert (tmp_path / "sub" / "a.json").read_text() == "new m"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gguf", "sub"]


def test_a_failed_move_puts_every_previous_file_back(tmp_path, monkeypatch):
    from harmony_ref._io import StagedOutputs

    (tmp_path / "out.gguf").write_bytes(b"\x00previous file\xff")
    (tmp_path / "out.json").write_bytes(b"previous manifest")
    before = _tree(tmp_path)
    _fail_on(monkeypatch, "out.json")  # the second move fails after the first succeeded
    with pytest.raises(IsADirectoryError), StagedOutputs() as staged:
        staged.stage_bytes(tmp_path / "out.gguf", b"new file")
        staged.stage_bytes(tmp_path / "out.json", b"new manifest")
        staged.commit()
    assert _tree(tmp_path) == before  # byte for byte, and no temporary or kept file left


def test_a_failed_move_removes_a_new_file_without_predecessor(tmp_path, monkeypatch):
    from harmony_ref._io import StagedOutputs

    (tmp_path / "out.json").write_bytes(b"previous manifest")
    before = _tree(tmp_path)
    _fail_on(monkeypatch, "out.json")
    with pytest.raises(IsADirectoryError), StagedOutputs() as staged:
        staged.stage_bytes(tmp_path / "out.gguf", b"new file")
        staged.stage_bytes(tmp_path / "out.json", b"new manifest")
        staged.commit()
    assert _tree(tmp_path) == before


def test_a_failure_before_commit_leaves_no_temporary(tmp_path):
    from harmony_ref._io import StagedOutputs

    (tmp_path / "out.gguf").write_bytes(b"previous")
    before = _tree(tmp_path)
    with pytest.raises(RuntimeError), StagedOutputs() as staged:
        staged.stage_bytes(tmp_path / "out.gguf", b"half")
        raise RuntimeError("the work failed")
    assert _tree(tmp_path) == before


def test_write_checked_never_replaces_with_a_file_that_fails_its_check(tmp_path):
    from harmony_ref._io import write_checked

    target = tmp_path / "p.toml"
    target.write_bytes(b"previous profile")

    def check(path):
        assert path.suffix == ".toml" and path != target
        raise ValueError(f"{path}: does not load back")

    with pytest.raises(ValueError, match="does not load back"):
        write_checked(target, "broken", check)
    assert _tree(tmp_path) == {"p.toml": b"previous profile"}
    write_checked(target, "good", lambda p: None)
    assert _tree(tmp_path) == {"p.toml": b"good"}
