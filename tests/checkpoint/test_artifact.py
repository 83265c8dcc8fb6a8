"""Exported artifacts on a tiny random checkpoint: bit-identical embeddings after a round trip,
and refusal (naming the tensor) of tampered, truncated or padded files, by `verify` and by load."""

import json
import struct

import numpy as np
import pytest

from harmony_ref.checkpoint.artifact import (
    ArtifactError,
    export_artifact,
    load_artifact,
    verify_artifact,
)
from harmony_ref.cli import main
from harmony_ref.runtime.minilm import MiniLM

SENTENCES = ["The train to Leeds leaves at five.", "I did not lock the door.", "a", "zzqx"]
MIXED = (
    'name = "m"\ndefault = "int4-g32"\nkeep_int8_layers = ["attention.self.query"]\n'
    '[layers]\n"encoder.layer.0.output.dense" = "fp16"\n"*.1.intermediate*" = "int4-g128"\n'
    '"encoder.layer.1.attention.self.key" = "fp32"\n"encoder.layer.1.attention.self.value" = "int4-g64-sym"\n'
)


@pytest.fixture(scope="module")
def artifact(tiny, tmp_path_factory):
    d = tmp_path_factory.mktemp("art")
    (d / "mixed.toml").write_text(MIXED)
    path = d / "model.safetensors"
    export_artifact(tiny, str(d / "mixed.toml"), path)
    return path, str(d / "mixed.toml")


@pytest.mark.parametrize("policy", ["fp32", "fp16", "int8", "int4-g32", "int4-g128"])
def test_round_trip_is_bit_identical(tiny, tmp_path, policy):
    path = tmp_path / "a.safetensors"
    export_artifact(tiny, policy, path)
    loaded = MiniLM.from_artifact(path)
    np.testing.assert_array_equal(loaded.encode(SENTENCES, None), tiny.encode(SENTENCES, policy))
    assert loaded.linear_nbytes(None) == tiny.linear_nbytes(policy)
    assert [p.name for p in tmp_path.iterdir()] == ["a.safetensors"]  # no temporary file left


def test_mixed_round_trip_and_manifest(tiny, artifact):
    path, policy = artifact
    loaded = MiniLM.from_artifact(path)
    np.testing.assert_array_equal(loaded.encode(SENTENCES, None), tiny.encode(SENTENCES, policy))
    v = verify_artifact(path)
    assert v.metadata["format_version"] == "2"
    layers = v.layers
    assert layers["encoder.layer.0.output.dense"]["format"] == "fp16"
    assert layers["encoder.layer.1.intermediate.dense"] == {
        "format": "int4-g128",
        "shape": [256, 128],
        "group_size": 128,
        "scheme": "asym",
    }
    assert layers["encoder.layer.1.attention.self.value"]["scheme"] == "sym"
    assert layers["encoder.layer.0.attention.self.query"]["format"] == "int8"
    manifest = json.loads(v.metadata["tensor_sha256"])
    assert set(manifest) == set(v.header) and len(manifest) == v.n_tensors
    assert "encoder.layer.0.attention.self.key.weight.zero_point" in manifest
    with pytest.raises(ValueError, match="policy is fixed"):
        loaded.encode(["x"], "fp32")


def _tensor_range(path, name):
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    begin, end = json.loads(blob[8 : 8 + n])[name]["data_offsets"]
    return 8 + n + begin, 8 + n + end


@pytest.mark.parametrize(
    "tensor",
    [
        "encoder.layer.1.intermediate.dense.weight.packed",
        "encoder.layer.0.attention.self.key.weight.scale",
        "embeddings.word_embeddings.weight",
    ],
)
def test_tampered_tensor_is_refused_by_name(artifact, tmp_path, tensor, capsys):
    path, _ = artifact
    begin, end = _tensor_range(path, tensor)
    blob = bytearray(path.read_bytes())
    blob[(begin + end) // 2] ^= 0x01  # one bit
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(bytes(blob))
    with pytest.raises(ArtifactError, match=f"tensor '{tensor}' failed its SHA-256"):
        verify_artifact(bad)
    with pytest.raises(ArtifactError, match=tensor):
        load_artifact(bad)
    with pytest.raises(ArtifactError):
        MiniLM.from_artifact(bad)
    assert main(["verify", str(bad)]) == 1
    assert tensor in capsys.readouterr().err
    assert main(["verify", str(path)]) == 0


def test_truncated_file_is_refused(artifact, tmp_path, capsys):
    path, _ = artifact
    blob = path.read_bytes()
    last = max(
        json.loads(blob[8 : 8 + struct.unpack("<Q", blob[:8])[0]]).items(),
        key=lambda kv: kv[1]["data_offsets"][1] if kv[0] != "__metadata__" else -1,
    )[0]
    bad = tmp_path / "cut.safetensors"
    bad.write_bytes(blob[:-100])
    with pytest.raises(ArtifactError, match=f"tensor '{last}' is truncated"):
        verify_artifact(bad)
    assert main(["verify", str(bad)]) == 1
    assert "truncated" in capsys.readouterr().err
    for cut, msg in [
        (len(blob) // 2, "is truncated"),
        (100, "truncated inside the header"),
        (5, "not even a header length"),
    ]:
        bad.write_bytes(blob[:cut])
        with pytest.raises(ArtifactError, match=msg):
            load_artifact(bad)


def test_trailing_bytes_and_foreign_files_are_refused(artifact, tmp_path):
    from safetensors.numpy import save_file

    path, _ = artifact
    bad = tmp_path / "long.safetensors"
    bad.write_bytes(path.read_bytes() + b"\0" * 16)
    with pytest.raises(ArtifactError, match="unexpected bytes"):
        verify_artifact(bad)
    toml = tmp_path / "policy.toml"
    toml.write_text('name = "x"\ndefault = "int8"\n')
    with pytest.raises(ArtifactError, match="not a safetensors file"):
        verify_artifact(toml)
    plain = tmp_path / "plain.safetensors"
    save_file({"w": np.zeros((2, 2), np.float32)}, str(plain))
    with pytest.raises(ArtifactError, match="not a harmony-ref artifact"):
        verify_artifact(plain)


def test_verify_cli_missing_file_is_bad_input(tmp_path):
    assert main(["verify", str(tmp_path / "nope.safetensors")]) == 2


@pytest.mark.parametrize(
    "old,new",
    [
        (b'\\"group_size\\": 32', b'\\"group_size\\": 64'),
        (b'default = \\"int4-g32\\"', b'default = \\"int4-g64\\"'),
        (b'"dtype":"F16"', b'"dtype":"I16"'),
    ],
)
def test_tampered_header_is_refused(artifact, tmp_path, old, new, capsys):
    """A changed manifest or tensor entry (same length, so every offset still fits) is refused by
    the header hash, not misread as another format."""
    path, _ = artifact
    blob = path.read_bytes()
    assert old in blob
    bad = tmp_path / "hdr.safetensors"
    bad.write_bytes(blob.replace(old, new, 1))
    with pytest.raises(ArtifactError, match="header .* failed its SHA-256"):
        verify_artifact(bad)
    with pytest.raises(ArtifactError, match="header"):
        load_artifact(bad)
    assert main(["verify", str(bad)]) == 1
    assert "header" in capsys.readouterr().err


def test_an_export_that_fails_verification_keeps_the_previous_file(tiny, tmp_path, monkeypatch):
    # issue 45 item 1: the artifact is verified as a temporary, before it replaces anything
    from harmony_ref.checkpoint import artifact as mod

    path = tmp_path / "a.safetensors"
    path.write_bytes(b"the user's previous artifact")

    def bad(p):
        raise ArtifactError(f"{p}: tensor x: SHA-256 mismatch")

    monkeypatch.setattr(mod, "verify_artifact", bad)
    with pytest.raises(ArtifactError):
        export_artifact(tiny, "int8", path)
    assert [p.name for p in tmp_path.iterdir()] == ["a.safetensors"]
    assert path.read_bytes() == b"the user's previous artifact"
