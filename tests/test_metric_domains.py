"""Issue 16 item 1: a metric is finite and inside its physical domain, or it is an error: in the
constructor, in the record loader, in the gate (both records checked before any comparison) and
in --update-baseline (which never writes an out-of-domain metric)."""

import json
import math

import pytest

from harmony_ref.cli import main
from harmony_ref.config import RunConfig
from harmony_ref.metrics import Metric, Metrics, domain
from harmony_ref.track.record import Record, collect_provenance, load_record, write_json_atomic

BAD = [
    ("ttft_ms", math.nan, "ms"),
    ("ttft_ms", math.inf, "ms"),
    ("ttft_ms", -1.0, "ms"),
    ("weights_mb", -0.5, "MB"),
    ("decode_tokens_per_s", -3.0, "tokens/s"),
    ("launch_overhead_pct", 101.0, "%"),
    ("serve_busy_rate", 1.5, "fraction"),
    ("cosine_min", 1.2, "cosine"),
    ("prefill_kernel_launches", -1.0, "launches"),
    ("accuracy_drop_pct", 150.0, "pct_points"),
    ("peak_die_c", -300.0, "C"),
    ("host_gemv_speedup_x", -math.inf, "x"),
    # a unit other than the one the name carries would have no domain (a negative latency)
    ("ttft_ms", -5.0, "msec"),
    ("ttft_ms", -5.0, ""),
    ("decode_tokens_per_s", -3.0, "tok/s"),
    ("weights_mb", -1.0, "MiB"),
]


@pytest.mark.parametrize("name, value, unit", BAD)
def test_constructor_refuses_out_of_domain(name, value, unit):
    with pytest.raises(ValueError, match=name):
        Metric(name, value, unit)
    with pytest.raises(ValueError, match=name):
        Metrics().add(name, value, unit)


@pytest.mark.parametrize(
    "name, value, unit",
    [
        ("ttft_ms", 0.0, "ms"),
        ("accuracy_drop_pct", -2.0, "pct_points"),
        ("cosine_min", -0.1, "cosine"),
        ("host_model_mape_pct", 140.0, "%"),
        ("serve_utilisation", 1.0, "fraction"),
        ("peak_skin_c", 41.0, "C"),
        ("whatever", -5.0, "widgets"),
        ("memory_headroom_mb", -300.0, "MB"),
        ("cosine_mean", 1.0 + 1e-8, "cosine"),
    ],
)
def test_in_domain_values_pass(name, value, unit):
    assert Metric(name, value, unit).value == value


def test_samples_are_checked_too():
    with pytest.raises(ValueError, match="a sample = nan"):
        Metric("host_gemv_ms", 1.0, "ms", kind="measured", samples=(1.0, math.nan))


def test_domain_names_its_bounds():
    assert domain("ttft_ms", "ms") == (0.0, math.inf)
    assert domain("recall_at_1", "%") == (0.0, 100.0)


def _record(**values) -> dict:
    m = Metrics()
    m.add("ttft_ms", 100.0, "ms", "lower", "exact")
    m.add("decode_tokens_per_s", 20.0, "tokens/s", "higher", "exact")
    config = RunConfig.from_names("llama-3.2-3b", "int4-g128", profile="harmony-flagship").to_dict()
    d = Record(
        config,
        m,
        collect_provenance(),
        {"predicted": {"status": "ok", "detail": "", "metrics": m.names()}},
    ).to_dict()
    for name, v in values.items():
        d["metrics"][name]["value"] = v
    return d


def _write(path, d):
    path.write_text(json.dumps(d))  # json writes NaN/Infinity as a user's tool might
    return path


@pytest.mark.parametrize("value, shown", [(math.nan, "nan"), (math.inf, "inf"), (-5.0, "-5")])
def test_loader_names_file_field_and_value(tmp_path, value, shown):
    p = _write(tmp_path / "r.json", _record(ttft_ms=value))
    with pytest.raises(ValueError) as e:
        load_record(p)
    msg = str(e.value)
    assert str(p) in msg and "metrics.ttft_ms.value" in msg and shown in msg


@pytest.mark.parametrize("side", ["current", "baseline"])
@pytest.mark.parametrize("value", [math.nan, -1.0, math.inf])
def test_gate_refuses_bad_values_on_either_side(tmp_path, capsys, side, value):
    good = _write(tmp_path / "good.json", _record())
    bad = _write(tmp_path / "bad.json", _record(ttft_ms=value))
    base, cur = (good, bad) if side == "current" else (bad, good)
    assert main(["gate", "--baseline", str(base), "--current", str(cur)]) == 2
    err = capsys.readouterr().err
    assert "bad.json" in err and "ttft_ms" in err


def test_update_baseline_never_writes_a_nan(tmp_path, capsys):
    base = write_json_atomic(tmp_path / "baseline.json", _record())
    before = base.read_bytes()
    bad = _write(tmp_path / "bad.json", _record(decode_tokens_per_s=math.nan))
    assert main(["gate", "--baseline", str(base), "--current", str(bad), "--update-baseline"]) == 2
    assert base.read_bytes() == before
    assert not (tmp_path / "baseline.prev.json").exists()
    assert "decode_tokens_per_s" in capsys.readouterr().err


def test_update_baseline_on_a_new_path_writes_nothing_for_a_bad_record(tmp_path):
    bad = _write(tmp_path / "bad.json", _record(ttft_ms=-2.0))
    base = tmp_path / "new-baseline.json"
    assert main(["gate", "--baseline", str(base), "--current", str(bad), "--update-baseline"]) == 2
    assert not base.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["history", "import", "{bad}", "--history", "{d}/h.sqlite"],
        ["gate", "--baseline", "{d}/new-baseline.json", "--current", "{bad}", "--update-baseline"],
        ["gate", "--baseline", "{bad}", "--current", "{bad}"],
    ],
)
def test_a_unit_the_name_does_not_carry_never_enters_a_baseline_or_history(tmp_path, capsys, argv):
    # ttft_ms = -5 in 'msec': 'msec' has no domain, so the negative latency passed the domain
    # check, entered the history and became a baseline that gated as a pass
    d = _record()
    d["metrics"]["ttft_ms"].update(value=-5.0, unit="msec")
    bad = _write(tmp_path / "bad.json", d)
    assert main([a.format(d=tmp_path, bad=bad) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "bad.json: field 'metrics.ttft_ms.unit' = 'msec'" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json"]
