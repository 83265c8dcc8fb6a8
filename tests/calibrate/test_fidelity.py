"""Fidelity: a runtime fit recovers numbers it was given, refuses held-out points, the published
figures load and bad figure files fail precisely, and the committed host and llama.cpp
measurements reproduce the shipped runtime profiles' fits and their held-out scores (no llama.cpp
and no timing needed: the fixtures are the measurements)."""

import dataclasses
import json
import math

import pytest

from harmony_ref.calibrate.fit_runtime import (
    fit_on_points,
    fit_soc_efficiencies,
    get_param,
    shared_only,
    with_params,
)
from harmony_ref.calibrate.points import Point
from harmony_ref.calibrate.published import HELDOUT_FIGURES, figure_points, load_figures
from harmony_ref.cli import main
from harmony_ref.config import RunConfig
from harmony_ref.device.runtime import load_runtime
from harmony_ref.track import fidelity as fd

# The shipped runtime TOMLs round their fitted numbers to 6 significant digits.
TOML_ROUNDING = 1e-5


def _synthetic(rt, configs):
    """Points 'measured' by the model itself under `rt`: a fit must find rt's numbers again."""
    out = []
    for i, (soc, cfg, metric) in enumerate(configs):
        p = Point(f"p{i}", "phones", soc, rt.name, 0, cfg, metric, 1.0, "fit")
        out.append(dataclasses.replace(p, measured=p.predicted(rt)))
    return out


# llama.cpp-cpu at one matmul and one memory efficiency on every SoC (no entries), and a
# Llama 2 7B workload of the published figures' kind: what the synthetic fits start from
LLAMACPP_TRUTH = {"matmul": 0.17, "memory": 0.55}
LLAMA2_CFG = RunConfig.from_names("llama-2-7b", "int4-g32-sym", 64, 64, 2048)


def _llamacpp_shared():
    return with_params(shared_only(load_runtime("llama.cpp-cpu")), LLAMACPP_TRUTH)


def test_a_fit_recovers_the_numbers_that_made_the_points():
    truth = _llamacpp_shared()
    cfg = LLAMA2_CFG
    points = _synthetic(
        truth,
        [
            ("dimensity-9300", cfg, "prefill_tokens_per_s"),
            ("dimensity-9300", cfg, "decode_tokens_per_s"),
            ("kirin-9000e", cfg, "decode_tokens_per_s"),
        ],
    )
    start = with_params(truth, {"matmul": 0.4, "memory": 0.3})
    got, report = fit_on_points(start, points, ("matmul", "memory"))
    assert set(report.fitted) == {"matmul", "memory"}
    assert get_param(got, "matmul") == pytest.approx(0.17, rel=1e-4)
    assert get_param(got, "memory") == pytest.approx(0.55, rel=1e-4)
    assert report.fit_mape_pct < 1e-3


def test_each_soc_gets_the_matmul_its_own_points_give():
    """Points made by a runtime whose Kirin 9000E runs matmuls at 0.25 of its peak and every
    other SoC at 0.17: the shared fit compromises, then the Kirin gets 0.25 back from its own
    points, the Dimensity (whose points agree with the shared numbers) about the shared value,
    and the Snapdragon, with a decode figure only (no prompt to pin a matmul), no entry."""
    from harmony_ref.device.runtime import SocEfficiency

    shared = _llamacpp_shared()
    truth = dataclasses.replace(shared, soc_efficiency=(SocEfficiency("kirin-9000e", 0.25),))
    cfg = LLAMA2_CFG
    points = _synthetic(
        truth,
        [
            ("dimensity-9300", cfg, "prefill_tokens_per_s"),
            ("dimensity-9300", cfg, "decode_tokens_per_s"),
            ("kirin-9000e", cfg, "prefill_tokens_per_s"),
            ("kirin-9000e", cfg, "decode_tokens_per_s"),
            ("snapdragon-8-gen-3", cfg, "decode_tokens_per_s"),
        ],
    )
    start = with_params(shared, {"matmul": 0.4, "memory": 0.3})
    pooled, report = fit_on_points(start, points, ("matmul", "memory"))
    assert report.fit_mape_pct > 5  # one shared matmul cannot fit both SoCs' prompts
    got, rows = fit_soc_efficiencies(pooled, points)
    own = {e.soc: e for e in got.soc_efficiency}
    assert set(own) == {"dimensity-9300", "kirin-9000e"} == {r["soc"] for r in rows}
    assert own["kirin-9000e"].matmul == pytest.approx(0.25, rel=0.01)
    assert own["dimensity-9300"].matmul == pytest.approx(0.17, rel=0.01)
    assert own["kirin-9000e"].fitted_on == ("p2", "p3")
    for p in points:
        assert p.predicted(got) == pytest.approx(p.measured, rel=0.01), p.id
    # one SoC alone: the shared fit is that SoC's, no entry
    alone, rows = fit_soc_efficiencies(pooled, points[:2])
    assert alone.soc_efficiency == () and rows == []


def test_a_soc_whose_points_only_bound_its_matmul_gets_the_bound_nearest_the_shared():
    """A prompt that is memory-bound at any matmul efficiency above some floor (the 8 Elite's
    1B TTFT on qnn-npu) pins the floor, not wherever a solver stops above it."""
    shared = shared_only(load_runtime("qnn-npu"))
    cfg = RunConfig.from_names("llama-3.2-1b", "int4-g32", 128, 128, 4096)
    big = RunConfig.from_names("llama-2-7b", "int4-g32-sym", 128, 1, 2048)
    made_at_09 = _synthetic(
        with_params(shared, {"matmul": 0.9}), [("snapdragon-8-elite", cfg, "ttft_ms")]
    )
    other = _synthetic(shared, [("snapdragon-8-gen-3", big, "prefill_tokens_per_s")])
    points = [made_at_09[0], dataclasses.replace(other[0], id="q")]
    got, _ = fit_soc_efficiencies(shared, points)
    floor = got.soc_entry("snapdragon-8-elite").matmul
    assert shared.efficiency.matmul < floor < 0.9
    ttft = made_at_09[0]
    assert ttft.predicted(got) == pytest.approx(ttft.measured, rel=1e-3)
    lower = dataclasses.replace(
        got, soc_efficiency=(dataclasses.replace(got.soc_efficiency[0], matmul=floor * 0.97),)
    )
    assert ttft.predicted(lower) > ttft.measured * 1.001  # below the floor the prompt slows
    # the Snapdragon 8 Gen 3's point agrees with the shared value: its entry is the shared one
    assert got.matmul_on("snapdragon-8-gen-3") == pytest.approx(shared.efficiency.matmul, rel=1e-4)


def test_the_shipped_phone_runtimes_are_the_fit_of_their_figures(tmp_path):
    from harmony_ref.calibrate.run import calibrate_runtime_on_set

    for name in ("llama.cpp-cpu", "qnn-npu", "executorch-xnnpack", "mlc-gpu"):
        shipped = load_runtime(name)
        out = tmp_path / f"{name}.toml"
        calibrate_runtime_on_set("phones", name, out, multistart=False)
        refit = load_runtime(out)
        for f in ("matmul", "memory"):
            a, b = getattr(shipped.efficiency, f), getattr(refit.efficiency, f)
            assert a == pytest.approx(b, rel=1e-4), (name, f)
        assert [e.soc for e in refit.soc_efficiency] == [e.soc for e in shipped.soc_efficiency]
        for a, b in zip(shipped.soc_efficiency, refit.soc_efficiency):
            assert a.matmul == pytest.approx(b.matmul, rel=1e-4) and a.fitted_on == b.fitted_on
        assert refit.calibration.fitted_on == shipped.calibration.fitted_on


def test_a_parameter_no_point_moves_is_reported_not_fitted():
    rt = load_runtime("mlc-gpu")
    cfg = RunConfig.from_names("llama-2-7b", "int4-g32-sym", 128, 1, 2048)
    points = _synthetic(
        with_params(rt, {"matmul": 0.05}), [("snapdragon-8-gen-3", cfg, "prefill_tokens_per_s")]
    )
    got, report = fit_on_points(rt, points, ("matmul", "memory"))
    assert report.fitted == ("matmul",) and report.not_fitted == ("memory",)
    assert get_param(got, "memory") == get_param(rt, "memory")


def test_a_fit_refuses_held_out_points():
    p = figure_points(load_figures())[0]
    with pytest.raises(ValueError, match="held out"):
        fit_on_points(load_runtime(p.runtime), [dataclasses.replace(p, split="score")], ("matmul",))


def test_the_shipped_figures_carry_their_citations():
    figures = load_figures()
    assert len(figures) >= 12 and all(f.split == "fit" for f in figures)
    ids = {f.id for f in figures}
    for needed in (
        "xiao24-d9300-llama2-7b-prefill",
        "executorch-op12-llama3.2-1b-spinquant-decode",
        "powerinfer2-sd8g3-7b-int4-prefill-npu",
        "aihub-sd8elite-llama3.2-1b-w4a16-decode",
    ):
        assert needed in ids
    assert all(("arXiv" in f.source or "/" in f.source) for f in figures)
    by_id = {f.id: f.value for f in figures}
    assert by_id["xiao24-kirin9000e-llama2-7b-decode"] == 4.34
    assert by_id["executorch-op12-llama3.2-1b-spinquant-prefill"] == 260.5


FIGURE = """[[figure]]
id = "a"
source = "somewhere"
profile = "dimensity-9300"
runtime = "llama.cpp-cpu"
model = "llama-2-7b"
policy = "int4-g32-sym"
prompt_tokens = 64
metric = "decode_tokens_per_s"
value = 8.0
split = "score"
"""


@pytest.mark.parametrize(
    "edit, message",
    [
        (("value = 8.0", "value = -8.0"), "field 'figure[0].value' = -8.0: must be >= "),
        (
            ('metric = "decode_tokens_per_s"', 'metric = "speed"'),
            "field 'figure[0].metric' = 'speed'",
        ),
        (
            ('profile = "dimensity-9300"', 'profile = "no-phone"'),
            "field 'figure[0].profile' = 'no-phone'",
        ),
        (('runtime = "llama.cpp-cpu"', 'runtime = "tvm"'), "field 'figure[0].runtime' = 'tvm'"),
        (('split = "score"', 'split = "test"'), "field 'figure[0].split' = 'test'"),
        (("prompt_tokens = 64\n", ""), "missing field 'figure[0].prompt_tokens'"),
    ],
)
def test_bad_figure_files_name_file_field_and_value(tmp_path, edit, message):
    path = tmp_path / "f.toml"
    path.write_text(FIGURE.replace(*edit))
    with pytest.raises(ValueError, match=message.replace("[", "\\[").replace("]", "\\]")) as e:
        load_figures(path)
    assert str(path) in str(e.value)


def test_a_duplicate_figure_id_is_refused(tmp_path):
    path = tmp_path / "f.toml"
    path.write_text(FIGURE + "\n" + FIGURE)
    with pytest.raises(ValueError, match="figure\\[1\\].id' = 'a': another figure has that id"):
        load_figures(path)


def test_held_out_figures_are_scored_and_fitted_ones_shown_apart(tmp_path, capsys):
    path = tmp_path / "f.toml"
    path.write_text(FIGURE)
    assert main(["fidelity", "--sets", "phones", "--figures", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    row = next(r for r in out["summary"] if r["set"] == "phones" and r["phase"] == "all")
    shipped_held = len(load_figures(shipped=HELDOUT_FIGURES))
    assert row["scored"] == 1 + shipped_held and row["fitted"] == len(load_figures())
    held = [p for p in out["points"] if p["split"] == "score"]
    assert len(held) == 1 + shipped_held and "a" in {p["id"] for p in held}
    assert row["mape_pct"] == pytest.approx(sum(abs(p["error_pct"]) for p in held) / len(held))
    assert out["metrics"]["fidelity_phones_median_error_pct"]["value"] == pytest.approx(
        row["median_ape_pct"]
    )


def test_the_shipped_held_out_figures_are_scored_and_never_fitted():
    """published-heldout.toml: every figure split "score", none named by a runtime's
    [calibration] fitted_on, no id shared with the calibration figures, each predicted finitely
    and within a factor of 2 (the issue's bound on figures the model has not seen)."""
    held = load_figures(shipped=HELDOUT_FIGURES)
    assert len(held) >= 10 and {f.split for f in held} == {"score"}
    assert not {f.id for f in held} & {f.id for f in load_figures()}
    fitted = {i for f in held for i in load_runtime(f.runtime).calibration.fitted_on}
    assert not {f.id for f in held} & fitted
    for s in fd.score(figure_points(held)):
        assert math.isfinite(s.predicted) and s.predicted > 0 and not s.fitted
        assert 0.5 < s.predicted / s.point.measured < 2.0, s.point.id


def test_the_held_out_phones_meet_issue_44s_targets():
    """Median absolute error <= 15% and none off by more than 1.5x on the shipped held-out
    figures; the BF16 rows (ExecuTorch, bf16 widened to fp32) within 15%, where bf16 computed
    natively put their prompts 2.2x too fast."""
    import statistics

    from harmony_ref.device.runtime import RuntimeFloat16

    scored = fd.score(figure_points(load_figures(shipped=HELDOUT_FIGURES)))
    ratios = [s.predicted / s.point.measured for s in scored]
    assert statistics.median(abs(r - 1) for r in ratios) <= 0.15
    assert max(max(r, 1 / r) for r in ratios) <= 1.5
    bf16 = [s for s in scored if s.point.config.policy.float16 == "bf16"]
    assert len(bf16) == 4 and all(abs(s.error_pct) < 15 for s in bf16)
    rt = load_runtime("executorch-xnnpack")
    native = dataclasses.replace(rt, float16=RuntimeFloat16())
    for s in bf16:
        if s.point.metric == "prefill_tokens_per_s":
            assert s.point.predicted(native) / s.point.measured > 2.0


def test_a_scored_point_its_runtime_was_fitted_on_is_refused(monkeypatch):
    from harmony_ref.device import runtime as rmod

    p = figure_points(load_figures())[0]
    rt = load_runtime(p.runtime)
    cal = dataclasses.replace(rt.calibration, fitted_on=rt.calibration.fitted_on + ("leak",))
    leaky = dataclasses.replace(rt, calibration=cal)
    monkeypatch.setattr(rmod, "load_runtime", lambda name: leaky)
    with pytest.raises(ValueError, match="held out means held out"):
        fd.score([dataclasses.replace(p, id="leak", split="score")])


def test_every_calibration_figure_is_predicted_finitely():
    for s in fd.score(figure_points(load_figures())):
        assert math.isfinite(s.predicted) and s.predicted > 0 and s.fitted


def test_a_points_prediction_is_the_simulated_backends():
    from harmony_ref.backends.simulated import SimulatedDevice
    from harmony_ref.calibrate.points import POINT_METRICS, predict_metric

    cfg = RunConfig.from_names("llama-3.2-1b", "w4a8-g32", 64, 32, 2048)
    for soc, rt in (
        ("snapdragon-8-gen-3", "executorch-xnnpack"),
        ("kirin-9000e", None),
        ("harmony-flagship", None),
    ):
        from harmony_ref.device.runtime import load_profile

        p = load_profile(soc, rt)
        full = SimulatedDevice(p).predict(cfg)
        for metric in POINT_METRICS:
            assert predict_metric(p, cfg, metric) == full.value(metric), (soc, metric)
