"""The gate's rules on records built here (exact/measured, U test, confirm-on-rerun, direction,
tolerance TOML) and the command's exit codes on bad input. The end-to-end regression made by a
real profile change lives in tests/job/test_main.py."""

import json

import numpy as np
import pytest

from harmony_ref.cli import main
from harmony_ref.config import RunConfig
from harmony_ref.metrics import Metric, Metrics
from harmony_ref.track import gate
from harmony_ref.track.record import Record, collect_provenance, load_record, write_record

PROV = collect_provenance()


def _rec(ttft=100.0, tps=20.0, host=None, host_samples=None, extra=None) -> Record:
    m = Metrics()
    m.add("ttft_ms", ttft, "ms", "lower", "exact")
    m.add("decode_tokens_per_s", tps, "tokens/s", "higher", "exact")
    m.add("weights_mb", 1800.0, "MB", "none", "exact")
    if host is not None:
        m.add("host_gemv_speedup_x", host, "x", "higher", "measured", samples=host_samples)
    if extra:
        m.add(extra, 1.0, "ms")
    config = RunConfig.from_names("llama-3.2-3b", "int4-g128", profile="harmony-flagship").to_dict()
    return Record(
        config, m, PROV, {"predicted": {"status": "ok", "detail": "", "metrics": m.names()}}
    )


def _samples(center, n=7, spread=0.01, seed=0):
    return list(center * (1 + spread * np.random.default_rng(seed).standard_normal(n)))


def _status(report, name):
    return next(r for r in report.rows if r.metric == name)


def test_unchanged_passes():
    r = gate.compare(
        _rec(host=1.4, host_samples=_samples(1.4)),
        _rec(host=1.4, host_samples=_samples(1.4, seed=1)),
    )
    assert report_ok(r)
    assert _status(r, "weights_mb").status == gate.INFO


def report_ok(r):
    return r.exit_code == 0 and not r.regressions


@pytest.mark.parametrize(
    "ttft, tps, status",
    [
        (100.05, 20.0, gate.PASS),  # +0.05%: inside the 0.1% exact limit
        (100.2, 20.0, gate.REGRESSION),  # +0.2% slower first token
        (99.0, 20.0, gate.IMPROVED),  # better never fails
        (100.0, 19.9, gate.REGRESSION),  # higher-is-better metric dropped 0.5%
    ],
)
def test_exact_rules(ttft, tps, status):
    r = gate.compare(_rec(), _rec(ttft=ttft, tps=tps))
    got = {row.metric: row.status for row in r.rows}
    assert status in (got["ttft_ms"], got["decode_tokens_per_s"])
    assert r.exit_code == (1 if status == gate.REGRESSION else 0)


def test_measured_noise_is_not_a_regression():
    # 15% worse on the median, but the sample clouds overlap: U test cannot call it real.
    base = [1.0, 1.6, 1.1, 1.5, 1.2]
    cur = [0.9, 1.5, 1.0, 1.4, 1.1]
    r = gate.compare(_rec(host=1.3, host_samples=base), _rec(host=1.1, host_samples=cur))
    row = _status(r, "host_gemv_speedup_x")
    assert row.status == gate.NOISE and "U test p=" in row.verdict
    assert r.exit_code == 0


def test_measured_regression_without_rerun_says_so():
    r = gate.compare(
        _rec(host=1.4, host_samples=_samples(1.4)),
        _rec(host=1.0, host_samples=_samples(1.0)),
        no_remeasure_reason="no backend here",
    )
    row = _status(r, "host_gemv_speedup_x")
    assert (
        row.status == gate.REGRESSION and "not confirmed on rerun: no backend here" in row.verdict
    )
    assert r.exit_code == 1


def test_three_samples_a_side_can_still_fail():
    # 3 against 3: the one-sided U test's smallest p is 1/20 = 0.05, never < alpha. A 30% drop
    # with every sample worse was called noise, so no 3-repeat regression could ever fail.
    base = _rec(host=1.4, host_samples=[1.39, 1.40, 1.41])
    r = gate.compare(base, _rec(host=1.0, host_samples=[0.99, 1.0, 1.01]))
    row = _status(r, "host_gemv_speedup_x")
    assert row.status == gate.REGRESSION and "every sample worse" in row.verdict
    # overlapping clouds of 3 stay noise
    r = gate.compare(base, _rec(host=1.2, host_samples=[1.0, 1.2, 1.45]))
    assert _status(r, "host_gemv_speedup_x").status == gate.NOISE


def test_confirm_on_rerun():
    base = _rec(host=1.4, host_samples=_samples(1.4))
    cur = _rec(host=1.0, host_samples=_samples(1.0))
    calls = []

    def good_rerun(name):
        calls.append(name)
        return Metric(name, 1.4, "x", "higher", "measured", tuple(_samples(1.4, seed=3)))

    r = gate.compare(base, cur, remeasure=good_rerun)
    assert calls == ["host_gemv_speedup_x"]
    assert _status(r, "host_gemv_speedup_x").status == gate.NOISE and r.exit_code == 0

    def bad_rerun(name):
        return Metric(name, 0.95, "x", "higher", "measured", tuple(_samples(0.95, seed=4)))

    r = gate.compare(base, cur, remeasure=bad_rerun)
    row = _status(r, "host_gemv_speedup_x")
    assert (
        row.status == gate.REGRESSION
        and "confirmed on rerun" in row.verdict
        and row.current == 0.95
    )


def test_measured_improvement_never_reruns():
    def boom(name):
        raise AssertionError("an improvement must not be re-measured")

    r = gate.compare(
        _rec(host=1.0, host_samples=_samples(1.0)),
        _rec(host=2.0, host_samples=_samples(2.0)),
        remeasure=boom,
    )
    assert _status(r, "host_gemv_speedup_x").status == gate.IMPROVED


def test_implausible_flag_is_called_out():
    cur = _rec()
    cur.metrics.put(cur.metrics["ttft_ms"].flagged("implausible"))
    r = gate.compare(_rec(), cur)
    assert "current implausible" in _status(r, "ttft_ms").verdict


def test_missing_metric_and_config_mismatch_are_bad_input():
    with pytest.raises(ValueError, match="missing from current: host_gemv_speedup_x"):
        gate.compare(_rec(host=1.0, host_samples=[1.0] * 3), _rec())
    with pytest.raises(ValueError, match="missing from baseline: extra_ms"):
        gate.compare(_rec(), _rec(extra="extra_ms"))
    other = _rec()
    other.config = RunConfig.from_names(
        "llama-3.2-3b", "int8", profile="harmony-flagship"
    ).to_dict()
    with pytest.raises(ValueError, match="different config.*policy"):
        gate.compare(_rec(), other)


def test_tolerance_file(tmp_path):
    t = gate.load_tolerances()
    assert t.limit_pct(Metric("ttft_ms", 1.0, "ms")) == gate.DEFAULT_EXACT_PCT
    assert t.limit_pct(Metric("host_gemv_int4_ms", 1.0, "ms", kind="measured")) == 50.0
    f = tmp_path / "tol.toml"
    f.write_text(
        '[defaults]\nexact_pct = 1.0\n[metrics.ttft_ms]\ntolerance_pct = 5\nreason = "x"\n'
    )
    t = gate.load_tolerances(f)
    assert t.limit_pct(Metric("ttft_ms", 1.0, "ms")) == 5.0
    assert t.limit_pct(Metric("decode_tokens_per_s", 1.0, "tokens/s")) == 1.0
    r = gate.compare(_rec(), _rec(ttft=104.0), t)
    assert r.exit_code == 0
    for bad, field in [
        ("[defaults]\nexact_pct = -1\n", "defaults.exact_pct"),
        ("[metrics.ttft_ms]\ntolerance = 5\n", "metrics.ttft_ms"),
        ("[defaults]\nalpha = 2\n", "defaults.alpha"),
        ("[limits]\n", "limits"),
    ]:
        f.write_text(bad)
        with pytest.raises(ValueError, match=field):
            gate.load_tolerances(f)


def test_markdown_table():
    r = gate.compare(_rec(), _rec(ttft=120.0))
    md = gate.to_markdown(r)
    assert md.startswith("## harmony-ref gate: FAIL")
    assert "| metric | baseline | current | change | limit | verdict |" in md
    assert (
        "| `ttft_ms` (exact) | 100 ms | 120 ms | +20.00% | 0.1% | **REGRESSION: worse by 20.00%** |"
        in md
    )


def test_markdown_large_values_are_whole_numbers():
    md = gate.to_markdown(gate.compare(_rec(ttft=26522.4), _rec(ttft=26522.4)))
    assert "| `ttft_ms` (exact) | 26,522 ms | 26,522 ms | +0.00% |" in md


# --- the command --------------------------------------------------------------------------


def test_cli_pass_fail_and_summary(tmp_path, capsys):
    base = write_record(_rec(), tmp_path)
    worse = write_record(_rec(ttft=130.0), tmp_path)
    summary = tmp_path / "summary.md"
    assert main(["gate", "--baseline", str(base), "--current", str(base)]) == 0
    assert (
        main(["gate", "--baseline", str(base), "--current", str(worse), "--summary", str(summary)])
        == 1
    )
    assert "REGRESSION" in capsys.readouterr().out
    assert "REGRESSION" in summary.read_text()


def test_cli_json_verdicts(tmp_path, capsys):
    base = write_record(_rec(), tmp_path)
    worse = write_record(_rec(ttft=130.0), tmp_path)
    assert main(["gate", "--baseline", str(base), "--current", str(base), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "PASS" and out["exit_code"] == 0
    assert out["counts"]["regression"] == 0 and len(out["metrics"]) == sum(out["counts"].values())
    assert main(["gate", "--baseline", str(base), "--current", str(worse), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "FAIL" and out["exit_code"] == 1
    (ttft,) = [m for m in out["metrics"] if m["metric"] == "ttft_ms"]
    assert ttft["status"] == "regression" and ttft["change_pct"] == pytest.approx(30.0)
    assert (ttft["baseline"], ttft["current"]) == (100.0, 130.0)


def test_cli_json_update_baseline(tmp_path, capsys):
    baseline = tmp_path / "baseline.json"
    first = write_record(_rec(), tmp_path / "runs")
    second = write_record(_rec(ttft=90.0), tmp_path / "runs")
    args = ["gate", "--baseline", str(baseline), "--update-baseline", "--json", "--current"]
    assert main(args + [str(first)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["previous_kept_as"] is None and out["comparison"] is None
    assert main(args + [str(second)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["previous_kept_as"] == str(tmp_path / "baseline.prev.json")
    assert out["comparison"]["verdict"] == "PASS"  # 100 -> 90 ms is an improvement
    assert load_record(baseline).metrics.value("ttft_ms") == 90.0


def test_cli_bad_input_exits_2(tmp_path, capsys):
    good = write_record(_rec(), tmp_path)
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text(good.read_text()[:-40])
    old = tmp_path / "old.json"
    d = json.loads(good.read_text())
    d["schema_version"] = 0
    old.write_text(json.dumps(d))
    missing_metric = write_record(_rec(extra="extra_ms"), tmp_path)
    cases = [
        (tmp_path / "none.json", "does not exist"),
        (corrupt, "not valid JSON"),
        (old, "schema_version"),
        (missing_metric, "missing from"),
    ]
    for baseline, message in cases:
        assert main(["gate", "--baseline", str(baseline), "--current", str(good)]) == 2
        err = capsys.readouterr().err
        assert message in err and "error:" in err


def test_update_baseline_keeps_previous(tmp_path, capsys):
    baseline = tmp_path / "baseline.json"
    first = write_record(_rec(), tmp_path / "runs")
    second = write_record(_rec(ttft=90.0), tmp_path / "runs")
    assert (
        main(["gate", "--baseline", str(baseline), "--current", str(first), "--update-baseline"])
        == 0
    )
    assert load_record(baseline).metrics.value("ttft_ms") == 100.0
    assert (
        main(["gate", "--baseline", str(baseline), "--current", str(second), "--update-baseline"])
        == 0
    )
    assert load_record(baseline).metrics.value("ttft_ms") == 90.0
    assert load_record(tmp_path / "baseline.prev.json").metrics.value("ttft_ms") == 100.0
    # the gate itself never writes the baseline
    before = baseline.read_text()
    assert main(["gate", "--baseline", str(baseline), "--current", str(first)]) == 1
    assert baseline.read_text() == before


def test_measured_metrics_not_gated_across_machines():
    other = _rec(host=1.0, host_samples=_samples(1.0))
    other.provenance = {**PROV, "cpu_model": "Some Other CPU"}
    r = gate.compare(_rec(host=1.4, host_samples=_samples(1.4)), other)
    row = _status(r, "host_gemv_speedup_x")
    assert (
        row.status == gate.INFO
        and "different machine" in row.verdict
        and "Some Other CPU" in row.verdict
    )
    assert r.exit_code == 0
    # exact metrics are still gated across machines
    other = _rec(ttft=150.0)
    other.provenance = {**PROV, "cpu_model": "Some Other CPU"}
    assert gate.compare(_rec(), other).exit_code == 1


def test_update_baseline_from_latest_record(tmp_path, capsys):
    runs = tmp_path / "runs"
    baseline = tmp_path / "baseline.json"
    assert (
        main(
            [
                "gate",
                "--baseline",
                str(baseline),
                "--current",
                "latest",
                "--out-dir",
                str(runs),
                "--update-baseline",
            ]
        )
        == 2
    )
    assert "no run record" in capsys.readouterr().err
    write_record(_rec(ttft=100.0), runs)
    newest = write_record(_rec(ttft=95.0), runs)
    assert (
        main(
            [
                "gate",
                "--baseline",
                str(baseline),
                "--current",
                "latest",
                "--out-dir",
                str(runs),
                "--update-baseline",
            ]
        )
        == 0
    )
    assert load_record(baseline).metrics.value("ttft_ms") == 95.0 and newest.exists()


def test_tox_envs_run_the_gates():
    """`tox -e perf` goes through the pytest-benchmark wrapper; `tox -e nightly` gates a fresh run
    against the committed baseline and writes the Markdown summary to a file."""
    import configparser
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(root / "tox.ini")
    assert "python -m harmony_ref.track.perf" in tox["testenv:perf"]["commands"]
    nightly = tox["testenv:nightly"]["commands"]
    assert (
        "harmony-ref gate --baseline results/baseline.json" in nightly and "--summary " in nightly
    )
    assert (root / "results" / "baseline.json").is_file()


def _checked(rec: Record, accurate: bool, why: str = "") -> Record:
    """`rec` as check-runtime writes it: runtime_accurate, and every metric flagged when wrong."""
    m = Metrics(dict(rec.metrics.items))
    m.add(
        "runtime_accurate",
        1.0 if accurate else 0.0,
        "bool",
        "higher",
        "exact",
        description=why or "within the bound",
    )
    if not accurate:
        m = Metrics({n: x.flagged("inaccurate") for n, x in m.items.items()})
    return Record(rec.config, m, rec.provenance, rec.parts)


def test_inaccurate_run_is_never_a_result():
    why = "perplexity 62.8 is 5.000x the FP32 reference 12.5, beyond the bound 1.0112"
    base = _checked(_rec(), True)
    # faster by far, and every number otherwise "better": still a regression on every metric
    cur = _checked(_rec(ttft=10.0, tps=200.0), False, why)
    r = gate.compare(base, cur)
    assert r.exit_code == 1
    assert {x.metric for x in r.regressions} == set(cur.metrics.names())  # weights_mb (info) too
    speed = _status(r, "decode_tokens_per_s")
    assert speed.verdict.startswith("REGRESSION: from a run flagged inaccurate (current)")
    assert why in _status(r, "runtime_accurate").verdict
    assert why in gate.to_markdown(r)
    # an inaccurate baseline is no result either, even against an identical current run
    assert gate.compare(cur, cur).exit_code == 1
    assert gate.compare(base, _checked(_rec(), True)).exit_code == 0


def test_inaccurate_run_missing_metrics_still_fails():
    # a runtime that failed its own comparison printed no timings: the shared metrics are judged
    base = _checked(_rec(host=1.4, host_samples=_samples(1.4)), True)
    cur = _checked(_rec(), False, "output tensor logits: all 50 printed values are 0")
    assert gate.compare(base, cur).exit_code == 1
    with pytest.raises(ValueError, match="metric sets differ"):  # an accurate one may not
        gate.compare(base, _checked(_rec(), True))


def test_a_failed_baseline_update_keeps_both_previous_files(tmp_path, monkeypatch, capsys):
    # issue 45 item 1: the new baseline and the kept copy land together or not at all
    import os

    baseline = tmp_path / "baseline.json"
    first = write_record(_rec(), tmp_path / "runs")
    second = write_record(_rec(ttft=90.0), tmp_path / "runs")
    argv = ["gate", "--baseline", str(baseline), "--update-baseline", "--current"]
    assert main([*argv, str(first)]) == 0
    assert main([*argv, str(first)]) == 0  # baseline.json and baseline.prev.json both there
    before = {p: p.read_bytes() for p in (baseline, tmp_path / "baseline.prev.json")}
    # write_record appends to the history beside its folder (results/history.sqlite): there
    # before the failing update, and nothing more after it
    listed = sorted(p.name for p in tmp_path.iterdir())
    assert {"baseline.json", "baseline.prev.json", "runs"} <= set(listed)
    real = os.replace

    def replace(a, b, *args, **kw):
        if os.path.basename(b) == "baseline.json" and ".tmp-kept" not in str(a):
            raise PermissionError(13, "Permission denied", str(b))
        return real(a, b, *args, **kw)

    monkeypatch.setattr(os, "replace", replace)
    assert main([*argv, str(second)]) == 2
    assert "baseline.json: Permission denied" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == listed
    # and a kept copy that could not be written is refused before the work
    monkeypatch.undo()
    (tmp_path / "baseline.prev.json").unlink()
    (tmp_path / "baseline.prev.json").mkdir()
    assert main([*argv, str(second)]) == 2
    assert "baseline.prev.json" in capsys.readouterr().err
    assert baseline.read_bytes() == before[baseline]
