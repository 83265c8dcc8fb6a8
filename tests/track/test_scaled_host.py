"""Issue 16 item 7: a host measurement of a width-scaled copy says so where the user looks (the
record's part and the printed table title) and is never gated against an unscaled one."""

import io

import pytest

from harmony_ref.commands.run import print_record
from harmony_ref.config import RunConfig
from harmony_ref.job import main as job
from harmony_ref.metrics import Metrics
from harmony_ref.track import gate
from harmony_ref.track.record import Record, collect_provenance


def _rec(measured_model=None) -> Record:
    m = Metrics()
    m.add("decode_tokens_per_s", 20.0, "tokens/s", "higher", "measured")
    config = RunConfig.from_names(
        "llama-3.2-3b", "int4-g128", profile="harmony-flagship", backend="host"
    ).to_dict()
    part = {"status": "ok", "detail": "", "metrics": m.names()}
    if measured_model:
        part.update(
            measured_model=measured_model, measured_weights_mb=105.0, model_weights_mb=1682.0
        )
    return Record(config, m, collect_provenance(), {"predicted": part})


def test_scaled_and_unscaled_are_not_gated_together():
    with pytest.raises(ValueError, match="llama-3.2-3b/w4.*never gated"):
        gate.compare(_rec(), _rec("llama-3.2-3b/w4"))
    assert gate.compare(_rec("llama-3.2-3b/w4"), _rec("llama-3.2-3b/w4")).exit_code == 0


def test_the_table_title_says_scaled():
    out = io.StringIO()
    print_record(_rec("llama-3.2-3b/w4"), file=out)
    text = out.getvalue()
    assert "SCALED COPY llama-3.2-3b/w4 of llama-3.2-3b" in text
    assert "105 MB of weights instead of 1,682" in text
    assert job.measured_model(_rec("llama-3.2-3b/w4")) == "llama-3.2-3b/w4"


def test_a_host_run_above_the_limit_records_the_measured_model(monkeypatch):
    from harmony_ref.backends import host

    config = RunConfig.from_names("llama-3.2-3b", "int4-g128", 8, 2, 16, backend="host")
    got = host.fit_to_host(config, host.DEFAULT_MAX_WEIGHT_MB)
    assert got.spec.name != "llama-3.2-3b"  # the default host limit scales this model

    class Fake:
        name = "host"
        max_weight_mb = host.DEFAULT_MAX_WEIGHT_MB

        def run(self, cfg):
            from harmony_ref.backends.base import Measurement

            m = Metrics()
            m.add("decode_tokens_per_s", 9.0, "tokens/s", "higher", "measured")
            return Measurement(m, {"host_model": got.spec.name})

    import harmony_ref.backends.make as make

    monkeypatch.setattr(make, "make_backend", lambda *a, **k: Fake())
    _, info = job._predicted(config)
    assert info["measured_model"] == got.spec.name
    assert info["measured_weights_mb"] < info["model_weights_mb"]


def test_a_checkpoint_host_run_is_not_called_scaled(monkeypatch):
    """A checkpoint runs its own weights: its provenance names it by its label ("smollm2-135m
    (...; stored ...)"), which is not a scaled copy (the tutorial's `run --backend host --model
    smollm2-135m` printed "MEASURED ON A SCALED COPY ... (70 MB of weights instead of 70)")."""
    import dataclasses

    config = dataclasses.replace(
        RunConfig.from_names("smollm2-135m", "int4-g32", 8, 2, 16, backend="host"),
        checkpoint="smollm2-135m",
    )

    class Fake:
        name = "host"

        def run(self, cfg):
            from harmony_ref.backends.base import Measurement

            m = Metrics()
            m.add("decode_tokens_per_s", 9.0, "tokens/s", "higher", "measured")
            label = "smollm2-135m (Smollm2 135M; stored F32/Q4_1/Q8_0)"
            return Measurement(m, {"host_model": label})

    import harmony_ref.backends.make as make

    monkeypatch.setattr(make, "make_backend", lambda *a, **k: Fake())
    _, info = job._predicted(config)
    assert "measured_model" not in info


def test_the_tutorial_names_the_scaled_copy():
    """docs/tutorial.md says what `run --backend host` measures for the default model: the
    weight limit and the scaled copy's name are the code's."""
    from pathlib import Path

    from harmony_ref.backends import host

    text = " ".join((Path(__file__).parents[2] / "docs" / "tutorial.md").read_text().split())
    text = text.replace(" # ", " ")  # the comment runs over several lines
    default = RunConfig.from_names(backend="host")
    scaled = host.fit_to_host(default, host.DEFAULT_MAX_WEIGHT_MB).spec.name
    assert f"over {host.DEFAULT_MAX_WEIGHT_MB:g} MB of weights" in text
    assert (
        f"as the default {default.spec.name}, is measured as a width-scaled copy, {scaled}," in text
    )
