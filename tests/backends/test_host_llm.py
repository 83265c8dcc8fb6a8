"""`run --backend host` on a decoder checkpoint (a tiny GGUF the test writes): the real generation
timed, raw samples kept, decode tokens/s per context, the same metric names as the simulated
backend predicting the same model (the spec derived from the checkpoint), and the record's
config naming the checkpoint and carrying its spec."""

import json

from harmony_ref.backends import host_llm
from harmony_ref.backends.host import HostDevice
from harmony_ref.backends.simulated import SimulatedDevice
from harmony_ref.cli import main
from harmony_ref.config import RunConfig
from harmony_ref.runtime.loader import checkpoint_spec
from harmony_ref.track.record import load_record
from tests.fixtures.decoder.tiny import tiny_config


def _config(path, policy="int4-g32"):
    return RunConfig.from_names(
        checkpoint_spec(str(path)),
        policy,
        prompt_tokens=16,
        new_tokens=6,
        context_tokens=64,
        checkpoint=str(path),
        backend="host",
    )


def test_spec_from_checkpoint_matches_its_config(tiny_gguf):
    spec = checkpoint_spec(str(tiny_gguf))
    c = tiny_config()
    assert (
        spec.n_layers,
        spec.hidden,
        spec.n_heads,
        spec.n_kv_heads,
        spec.head_dim,
        spec.intermediate,
        spec.vocab,
    ) == (c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_dim, c.vocab_size)
    assert spec.param_count() == c.n_params() and spec.is_decoder
    cfg = _config(tiny_gguf)
    d = cfg.to_dict()
    assert d["model"] == str(tiny_gguf) and d["model_spec"]["hidden"] == c.dim
    back = RunConfig.from_dict(json.loads(json.dumps(d)))
    assert back == cfg and back.checkpoint == str(tiny_gguf)


def test_host_measures_the_real_generation(tiny_gguf, monkeypatch):
    monkeypatch.setattr(host_llm, "DECODE_CONTEXTS", (16, 48, 4096))
    cfg = _config(tiny_gguf)
    got = HostDevice(repeats=3).run(cfg)
    m = got.metrics
    for name in (
        "ttft_ms",
        "prefill_ms",
        "decode_step_ms",
        "e2e_ms",
        "decode_tokens_per_s",
        "prefill_tokens_per_s",
    ):
        assert m[name].kind == "measured" and len(m[name].samples) == 3 and m.value(name) > 0
    assert m.value("prefill_ms") < m.value("e2e_ms")
    assert {n for n in m.names() if "_ctx" in n} == {
        "decode_tokens_per_s_ctx16",
        "decode_tokens_per_s_ctx48",
    }
    sim = SimulatedDevice("harmony-flagship").predict(cfg)
    from harmony_ref.backends.simulated import phone_only

    # the phone-only metrics (NPU fallback, CPU clusters, lifecycle) are not host measurements
    assert {n for n in sim.names() if not phone_only(n)} == {
        n for n in m.names() if "_ctx" not in n
    }
    assert "tiny.gguf" in got.provenance["host_model"]
    assert m.value("weights_mb") == sim.value("weights_mb")  # the same counted model


def test_run_command_host_and_simulated_on_a_checkpoint(tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.setattr(host_llm, "DECODE_CONTEXTS", (16,))
    # int4-g32: the default int4-g128's group is longer than the tiny model's rows (K = 96)
    args = [
        "--model",
        str(tiny_gguf),
        "--policy",
        "int4-g32",
        "--prompt-tokens",
        "16",
        "--new-tokens",
        "4",
        "--context-tokens",
        "64",
        "--skip",
        "host,accuracy,coldstart,thermal",
    ]
    for backend in ("host", "simulated"):
        out = tmp_path / backend
        assert main(["run", "--backend", backend, *args, "--out-dir", str(out)]) == 0
        (path,) = out.glob("run-*.json")
        rec = load_record(path)
        assert rec.config["model"] == rec.config["accuracy_model"] == str(tiny_gguf)
        assert rec.config["model_spec"]["n_layers"] == 2
        assert "decode_tokens_per_s" in rec.metrics


def test_bad_checkpoint_through_run(tmp_path, capsys):
    from tests.runtime.test_decoder_commands import _bad

    path = _bad(tmp_path, truncate=True)
    assert main(["run", "--backend", "host", "--model", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "bad.gguf: not a readable GGUF file" in err and len(err.splitlines()) == 1
