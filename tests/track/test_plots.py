"""Every plot the commands write, rendered: a valid PNG of the expected size, drawn without a
single matplotlib warning, with nothing past the figure's edge, no legend over data, no label
across a frame and no two labels over each other (`plot_style.layout_problems`); the checker itself
is shown to catch each of those on figures made to fail."""

from __future__ import annotations

import struct
import warnings

import numpy as np
import pytest

from harmony_ref.cli import main
from harmony_ref.track import plot_style, plots
from tests.fixtures.errors import shows_path

PROFILES = ["harmony-flagship", "harmony-midrange", "harmony-lowend"]
LABELS = [f"{p} · own" for p in PROFILES]  # compare's columns: each profile on its own runtime
MODEL, POLICY = "llama-3.2-3b", "int4-g128"


def png_size(path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk, after checking the signature."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def check_png(path, width: int, height: int) -> None:
    """Size as promised, decodable, and a blank border: nothing is cut by the figure's edge."""
    import matplotlib.image

    assert png_size(path) == (width, height)
    img = matplotlib.image.imread(path)  # decodes every row: a truncated file fails here
    assert img.shape[:2] == (height, width)
    rgb = img[..., :3]
    border = np.concatenate(
        [
            rgb[:2].reshape(-1, 3),
            rgb[-2:].reshape(-1, 3),
            rgb[:, :2].reshape(-1, 3),
            rgb[:, -2:].reshape(-1, 3),
        ]
    )
    assert (border > 0.98).all(), f"{path}: something is drawn on the figure's edge"
    assert (rgb < 0.5).any(), f"{path}: blank"


def render(build, path):
    """Build and write a figure with every warning an error; its layout problems."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = build()
        problems = plot_style.layout_problems(fig)
        plot_style.save_png(fig, path)
    return problems


@pytest.fixture(scope="module")
def compared():
    from harmony_ref.job.compare_run import compare_profiles
    from harmony_ref.track.compare import coldstart_phases

    frame, _notes = compare_profiles(PROFILES, MODEL, POLICY)
    return frame, coldstart_phases(PROFILES, MODEL, POLICY)


def test_compare_panels(compared, tmp_path):
    frame, phases = compared
    png = tmp_path / "compare.png"
    problems = render(
        lambda: plots.compare_figure(frame, "title", plots.DEFAULT_PANELS, phases), png
    )
    assert problems == []
    check_png(png, 1400, 120 + 420 * 2)


def test_four_columns_each_naming_its_runtime_read_without_overlaps(tmp_path):
    """Four phones on one runtime, then one phone on four: tick labels carry `profile ·
    runtime` on two lines each, the figure widens so no value label meets its neighbour."""
    from harmony_ref.job.compare_run import compare_profiles
    from harmony_ref.track.compare import coldstart_phases

    for cols in (
        ["snapdragon-8-gen-3", "dimensity-9300", "kirin-9000e", "snapdragon-8-elite"],
        [f"snapdragon-8-gen-3:{r}" for r in ("llama.cpp-cpu", "executorch-xnnpack", "mlc-gpu")]
        + ["snapdragon-8-gen-3:qnn-npu"],
    ):
        rt = "llama.cpp-cpu" if ":" not in cols[0] else None
        frame, _ = compare_profiles(cols, "llama-3.2-1b", "int4-g32", runtime=rt)
        phases = coldstart_phases(cols, "llama-3.2-1b", "int4-g32", runtime=rt)
        png = tmp_path / "four.png"
        fig = plots.compare_figure(frame, "title", plots.DEFAULT_PANELS, phases)
        ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
        assert all(len(t.splitlines()) >= 2 for t in ticks)
        assert [t.splitlines()[-1] for t in ticks][-1] in ("llama.cpp-cpu", "qnn-npu")
        problems = render(lambda: fig, png)  # noqa: B023 - used at once
        assert problems == []
        check_png(png, 1400 + 3 * 200, 120 + 420 * 2)


def test_compare_panels_other_metrics_and_one_panel(compared, tmp_path):
    frame, phases = compared
    picked = ["memory_headroom_mb", "coldstart_preload_ms", "peak_die_c", "fits_memory"]
    png = tmp_path / "picked.png"
    assert render(lambda: plots.compare_figure(frame, "title", picked, phases), png) == []
    check_png(png, 1400, 120 + 420 * 2)
    # Two stacked panels share one legend: every phase either shows, once, in the order paid.
    fig = plots.compare_figure(frame, "t", ["coldstart_preload_ms", "coldstart_cold_ms"], phases)
    names = [t.get_text() for t in fig.legends[0].get_texts()]
    assert names == [plots.COLDSTART_STEP_LABELS[s] for s in phases["cold"].index]
    png = tmp_path / "one.png"
    assert render(lambda: plots.compare_figure(frame, "title", ["ttft_ms"]), png) == []
    check_png(png, 1400, 120 + 420)


def test_compare_panel_values_are_the_frame_values(compared):
    """The printed labels are the comparison's numbers, the best one bold; the memory panel
    draws each phone's own budget; the cold-start stack sums to its metric."""
    frame, phases = compared
    fig = plots.compare_figure(
        frame, "t", ["decode_tokens_per_s", "peak_memory_mb", "coldstart_cold_ms"], phases
    )
    tps, mem, cold = fig.axes[:3]
    labels = [t for t in tps.texts if t.get_text()]
    want = [plot_style.fmt_value(v, "tokens/s") for v in frame.loc["decode_tokens_per_s", LABELS]]
    assert [t.get_text() for t in labels] == want
    assert [t.get_fontweight() for t in labels][0] == "bold"  # the flagship decodes fastest
    budgets = sorted(float(seg[0][1]) for seg in mem.collections[0].get_segments())
    assert budgets == sorted(frame.loc["app_budget_mb", LABELS].astype(float))
    assert any("over budget" in t.get_text() for t in mem.texts)  # the low-end phone: -132 MB
    tops = np.zeros(len(PROFILES))
    for container in cold.containers:
        tops = np.maximum(tops, [b.get_y() + b.get_height() for b in container])
    np.testing.assert_allclose(tops, frame.loc["coldstart_cold_ms", LABELS].astype(float))


def test_coldstart_phases_sum_to_the_metrics(compared):
    frame, phases = compared
    for strategy, table in phases.items():
        np.testing.assert_allclose(
            table.sum().to_numpy(dtype=float),
            frame.loc[f"coldstart_{strategy}_ms", LABELS].astype(float),
            rtol=1e-12,
        )
        assert (table >= 0).all().all() and (table.sum(axis=1) > 0).all()


def test_compare_unknown_metric_is_refused(compared):
    frame, _ = compared
    with pytest.raises(ValueError, match="no_such_metric not in this comparison"):
        plots.compare_figure(frame, "t", ["ttft_ms", "no_such_metric"])


def test_normalised_view(compared, tmp_path):
    frame, _ = compared
    png = tmp_path / "normalised.png"
    assert render(lambda: plots.normalised_figure(frame, "title"), png) == []
    check_png(png, 1400, 160 + len(frame) * (16 * len(PROFILES) + 14))


def test_thermal_plot(tmp_path):
    from harmony_ref.config import RunConfig
    from harmony_ref.device.runtime import load_profile
    from harmony_ref.device.thermal import sustained_generation

    profile = load_profile("harmony-flagship")
    config = RunConfig.from_names(MODEL, POLICY, 512, 128, 2048, 1, profile=profile.name)
    result = sustained_generation(profile, config, 12.0, 0.05)
    png = tmp_path / "thermal.png"
    assert render(lambda: plots.thermal_figure(result, profile.thermal, "title"), png) == []
    check_png(png, 1400, 800)


def test_serve_plot_and_queue_steps(tmp_path):
    from harmony_ref.device.serve import (
        Request,
        constant_rate_service,
        poisson_arrivals,
        simulate_serving,
    )

    service = constant_rate_service(500.0, 10.0)  # a 512+128 request: ~14 s
    result = simulate_serving(poisson_arrivals(0.15, 600.0, 1), service, 3, 15.0, 600.0)
    assert {o.status for o in result.outcomes} == {"completed", "busy", "timeout"}
    png = tmp_path / "serve.png"
    assert render(lambda: plots.serve_figure(result, "title"), png) == []
    check_png(png, 1400, 800)
    # The rebuilt queue never goes below zero nor above the limit, and ends empty.
    _times, waiting = plots.queue_length_steps(result.outcomes)
    assert min(waiting) == 0 and max(waiting) == result.max_queue_len <= 3 and waiting[-1] == 0
    # Three at once at an idle session: one served, two wait until their turns.
    three = simulate_serving(
        [Request(0.0, 10, 10)] * 3, constant_rate_service(100.0, 10.0), 3, 60.0
    )
    times, waiting = plots.queue_length_steps(three.outcomes)
    assert waiting == [0, 1, 2, 1, 0]
    assert times[1:3] == [0.0, 0.0]


def test_commands_write_their_plots(tmp_path, capsys):
    """Each command's --plot, end to end, at the promised size."""
    png = tmp_path / "c.png"
    assert (
        main(["compare", "--plot", str(png), "--metrics", "ttft_ms,e2e_ms", "--format", "csv"]) == 0
    )
    check_png(png, 1400, 120 + 420)
    png = tmp_path / "n.png"
    assert main(["compare", "--plot", str(png), "--plot-view", "normalised", "--json"]) == 0
    assert png_size(png)[0] == 1400
    png = tmp_path / "s.png"
    assert main(["serve", "--rate", "0.1", "--minutes", "5", "--plot", str(png), "--json"]) == 0
    check_png(png, 1400, 800)
    png = tmp_path / "t.png"
    assert main(["thermal", "--minutes", "2", "--plot", str(png), "--json"]) == 0
    check_png(png, 1400, 800)
    capsys.readouterr()


def test_compare_bad_plot_arguments_exit_2_before_work(tmp_path, capsys):
    png = tmp_path / "c.png"
    assert main(["compare", "--metrics", "ttft_ms"]) == 2
    assert "give --plot" in capsys.readouterr().err
    assert main(["compare", "--plot", str(png), "--metrics", "ttft_ms,nope"]) == 2
    err = capsys.readouterr().err
    assert "nope not in this comparison" in err and "ttft_ms" in err
    assert main(["compare", "--plot", str(png), "--metrics", "ttft_ms,ttft_ms"]) == 2
    assert "listed twice: ttft_ms" in capsys.readouterr().err
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    under_a_file = blocker / "c.png"
    for argv in (["compare"], ["serve"], ["thermal", "--minutes", "1"]):
        assert main([*argv, "--plot", str(under_a_file)]) == 2
        err = capsys.readouterr().err
        assert shows_path(err, under_a_file) and shows_path(err, blocker), err
        assert f"{blocker.name} is a file" in err and len(err.splitlines()) == 1
    assert not png.exists()


def test_a_plot_in_a_missing_folder_is_made_with_it(tmp_path, capsys):
    """Like every output path (harmony_ref/_io.py): missing folders are created at write time."""
    png = tmp_path / "new" / "dir" / "c.png"
    assert main(["compare", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_profile_colours_are_stable():
    shipped = plot_style.profile_colours(PROFILES)
    assert shipped == plot_style.profile_colours(PROFILES[::-1])
    mixed = plot_style.profile_colours(["mine.toml", "harmony-lowend", "other.toml"])
    assert mixed["harmony-lowend"] == shipped["harmony-lowend"]
    assert len(set(mixed.values())) == 3 and not set(mixed.values()) - set(plot_style.PALETTE)


def test_fmt_value():
    assert plot_style.fmt_value(26522.41, "ms") == "26,522 ms"
    assert plot_style.fmt_value(206.578, "ms") == "207 ms"
    assert plot_style.fmt_value(0.58838, "ratio") == "0.588"
    assert plot_style.fmt_value(74.4, "C") == "74.4 °C"
    assert plot_style.fmt_value(float("nan"), "ms") == "n/a"


def test_layout_checker_catches_what_it_claims():
    """A figure with a legend over the data, a label across the frame, two labels on top of each
    other and a title past the edge: each is reported."""
    with plot_style.style():
        fig, ax = plot_style.figure(400, 300)
        ax.plot([0, 1], [0, 1], label="line")
        ax.legend(loc="center")
        ax.set_ylim(0, 1)
        ax.text(0.98, 0.5, "a long label across the right frame")
        ax.text(0.1, 0.1, "one")
        ax.text(0.1, 0.1, "two")
        ax.set_title("a title much too long for a figure four hundred pixels wide, by far")
    problems = plot_style.layout_problems(fig)
    text = "\n".join(problems)
    assert "legend lies over the data area" in text
    assert "crosses the frame" in text
    assert "'one' and 'two' overlap" in text
    assert "reaches past the figure's edge" in text
    with plot_style.style():
        fig, ax = plot_style.figure(400, 300)
        ax.plot([0, 1], [0, 1])
    assert plot_style.layout_problems(fig) == []


def test_lifecycle_plot(tmp_path):
    from harmony_ref.config import RunConfig
    from harmony_ref.device.lifecycle import STRATEGIES, simulate_lifecycle
    from harmony_ref.device.runtime import load_profile
    from harmony_ref.track.lifecycle_plot import lifecycle_figure

    profile = load_profile("harmony-flagship")
    config = RunConfig.from_names("qwen2.5-0.5b", POLICY, 512, 128, 2048, 1, profile=profile.name)
    runs = [simulate_lifecycle(profile, config, s, 10) for s in STRATEGIES]
    png = tmp_path / "lifecycle.png"
    assert render(lambda: lifecycle_figure(runs, "qwen2.5-0.5b on harmony-flagship"), png) == []
    check_png(png, 1400, 640)
