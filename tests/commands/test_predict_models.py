"""`harmony-ref predict --model` takes what the other commands take (runtime/loader.py
resolve_model): a spec preset, a shipped checkpoint name, a .gguf file or a Hugging Face
directory (its spec from the file's metadata), `--policy as-stored` on a GGUF (the file's own
tensor types), and a bad file is one line naming it, exit 2."""

import json
import re

import pytest

from harmony_ref.backends.simulated import SimulatedDevice
from harmony_ref.cli import main
from harmony_ref.config import RunConfig
from harmony_ref.device.runtime import load_profile
from tests.fixtures.decoder.tiny import tiny_config, write_tiny_gguf, write_tiny_hf

SCENARIO = ["--prompt", "16", "--new", "8", "--context", "64"]


def predict(capsys, model, *extra):
    code = main(["predict", "--model", str(model), *SCENARIO, *extra, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = json.loads(captured.out)
    return out, {k: m["value"] for k, m in out["metrics"].items()}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The same tiny weights as a GGUF, an HF directory and a Q4_1 export of the GGUF; and an
    untied model's Q8_0 export (its own output.weight and token_embd.weight)."""
    from harmony_ref.checkpoint.gguf_export import export_gguf

    d = tmp_path_factory.mktemp("predict")
    write_tiny_gguf(d / "tiny.gguf")
    write_tiny_hf(d / "hf")
    export_gguf(str(d / "tiny.gguf"), "q4_1", d / "tiny-q4_1.gguf")
    write_tiny_gguf(d / "untied.gguf", tiny_config(tied=False))
    export_gguf(str(d / "untied.gguf"), "q8_0", d / "untied-q8_0.gguf")
    return d


def test_a_gguf_and_an_hf_directory_predict_as_their_spec(files, capsys):
    from harmony_ref.runtime.loader import checkpoint_spec

    out, gguf = predict(capsys, files / "tiny.gguf", "--policy", "int8")
    assert out["config"].startswith(f"{files / 'tiny.gguf'}/int8/p16-n8-c64")
    _, hf = predict(capsys, files / "hf", "--policy", "int8")
    assert hf == gguf  # the same weights: the same spec, the same prediction
    cfg = RunConfig.from_names(checkpoint_spec(str(files / "tiny.gguf")), "int8", 16, 8, 64)
    want = SimulatedDevice(load_profile("harmony-flagship")).predict(cfg)
    assert gguf["decode_tokens_per_s"] == pytest.approx(want.value("decode_tokens_per_s"))
    assert gguf["weights_mb"] == pytest.approx(want.value("weights_mb"))


def test_as_stored_prices_the_files_own_types(files, capsys):
    """A Q4_1 export as stored is the q4_1 policy (tied: the table is lm_head's, Q4_1); an
    untied Q8_0 export's embedding table is priced as its Q8_0, not the policy's FP32."""
    _, stored = predict(capsys, files / "tiny-q4_1.gguf", "--policy", "as-stored")
    _, q4_1 = predict(capsys, files / "tiny-q4_1.gguf", "--policy", "q4_1")
    assert stored == q4_1
    _, int8 = predict(capsys, files / "tiny-q4_1.gguf", "--policy", "int8")
    assert stored["weights_mb"] < int8["weights_mb"]
    _, untied = predict(capsys, files / "untied-q8_0.gguf", "--policy", "as-stored")
    _, q8_0 = predict(capsys, files / "untied-q8_0.gguf", "--policy", "q8_0")
    assert untied == q8_0


def test_as_stored_refusals_say_which_policy_to_use():
    from harmony_ref.runtime.loader import _stored_policy

    types = {f"blk.0.{t}.weight": "Q4_1" for t in ("attn_q", "attn_k", "attn_v")}
    types |= {"token_embd.weight": "Q8_0"}
    for kind, nearest in (("Q3_K", r"q4_0 \(4\.5 bits"), ("IQ4_NL", r"q4_0 \(4\.5 bits")):
        types["blk.0.attn_output.weight"] = kind
        with pytest.raises(ValueError) as e:
            _stored_policy(types, 1, "m.gguf")
        msg = str(e.value)
        assert re.search(rf"blk\.0\.attn_output\.weight is {kind}.*--policy {nearest}", msg), msg
        assert len(msg) < 200
    types["blk.0.attn_output.weight"] = "Q4_1"
    with pytest.raises(ValueError, match=r"blk\.0\.ffn_gate\.weight is \?"):  # missing
        _stored_policy(types, 1, "m.gguf")


def test_a_shipped_checkpoint_name_is_the_checkpoint(capsys):
    """smollm2-135m is the checkpoint (its spec from the file), even beside a spec preset of
    that name; skipped only when the registry that ships it is out of reach."""
    from harmony_ref.checkpoint.assets import AssetUnavailable
    from harmony_ref.runtime.loader import checkpoint_spec, resolve_model

    try:
        spec = checkpoint_spec("smollm2-135m")
    except AssetUnavailable as e:
        pytest.skip(f"SmolLM2 unavailable (package registry unreachable): {e}")
    assert resolve_model("smollm2-135m") == (spec, "smollm2-135m")
    assert "own metadata" in spec.source
    out, got = predict(capsys, "smollm2-135m", "--policy", "int4-g32")
    assert out["config"].startswith("smollm2-135m/int4-g32/")
    _, stored = predict(capsys, "smollm2-135m", "--policy", "as-stored")
    # the shipped file is Q4_1 (5.0 bits a weight) with a Q8_0 table: heavier than int4-g32
    assert stored["weights_mb"] > got["weights_mb"]


def test_a_spec_preset_still_resolves(capsys):
    from harmony_ref.model.spec import get_spec
    from harmony_ref.runtime.loader import resolve_model

    assert resolve_model("llama-3.2-1b") == (get_spec("llama-3.2-1b"), "")
    out, _ = predict(capsys, "llama-3.2-1b", "--policy", "int4-g128")
    assert out["config"].startswith("llama-3.2-1b/int4-g128/")


def _bad_files(d):
    (d / "text.gguf").write_text("not a gguf at all")
    good = (d / "tiny.gguf").read_bytes()
    (d / "truncated.gguf").write_bytes(good[: len(good) // 3])
    (d / "empty-dir").mkdir(exist_ok=True)
    (d / "blob.bin").write_bytes(b"\xc3\x28 binary")


@pytest.mark.parametrize(
    "name,extra,pattern",
    [
        ("text.gguf", [], r"text\.gguf: not a readable GGUF file"),
        ("truncated.gguf", [], r"truncated\.gguf: not a readable GGUF file"),
        ("empty-dir", [], r"empty-dir: no config\.json"),
        ("missing.gguf", [], r"missing\.gguf: no such file"),
        ("blob.bin", [], r"blob\.bin: not UTF-8 text \(byte 0\), not a model spec TOML"),
        ("hf", ["--policy", "as-stored"], r"--model .*hf is not a GGUF file"),
        ("llama-3.2-1b", ["--policy", "as-stored"], r"--model llama-3\.2-1b is not a GGUF"),
    ],
)
def test_a_bad_model_is_one_line_exit_2(files, capsys, name, extra, pattern):
    _bad_files(files)
    model = name if name == "llama-3.2-1b" else str(files / name)
    code = main(["predict", "--model", model, *SCENARIO, *extra])
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2 and captured.out == ""
    assert len(err.splitlines()) == 1 and len(err) < 200 and re.search(pattern, err), err
