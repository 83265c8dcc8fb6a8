"""The published asv report works offline (tools/asv_offline.py): the page is
rewritten to vendored npm files, and in headless Chromium, with every host but 127.0.0.1
unresolvable, the committed results of each machine are drawn as graphs.

The browser tests need Debian's chromium and the npm registry (or the tarballs in
$HARMONY_REF_CACHE/npm). `.ci/run` installs chromium and sets HARMONY_REF_BROWSER_TESTS=required,
so there a missing browser or registry fails; elsewhere they are skipped with the reason.
"""

from __future__ import annotations

import functools
import http.server
import importlib.resources
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
from pathlib import Path

import pytest

from tools import asv_offline
from tools.asv_offline import FILES, JQUERY, BadInput, VendorError

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "asv"
REQUIRED = os.environ.get("HARMONY_REF_BROWSER_TESTS") == "required"
# An exact metric every committed run has: its graph is the one the browser test opens.
GRAPHED_BENCHMARK = "bench_device.PredictedLlama32_3B.track_ttft_ms"
WINDOW = (1280, 800)
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # offline: nothing but the local server resolves, so a CDN tag left behind fails
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    "--virtual-time-budget=15000",
    f"--window-size={WINDOW[0]},{WINDOW[1]}",
]


def _asv_template() -> str:
    return importlib.resources.files("asv").joinpath("www/index.html").read_text("utf-8")


# --- the rewrite and the pins, no browser --------------------------------------------------------


def test_rewrite_points_every_cdn_tag_of_asvs_template_at_a_vendored_file():
    html = _asv_template()
    remote = asv_offline.remote_loads(html)
    assert sorted(remote) == sorted(f.url for f in FILES if f.url)
    page, replaced = asv_offline.rewrite_page(html)
    assert replaced == len(remote) == 10
    assert asv_offline.remote_loads(page) == []
    for f in FILES:
        if f.url:
            assert f'"{f.local}"' in page
    assert asv_offline.rewrite_page(page) == (page, 0)  # already rewritten: unchanged


def test_a_cdn_tag_the_table_does_not_know_is_bad_input():
    html = _asv_template().replace(
        "</head>", '<script src="https://cdn.example.org/new-plugin.js"></script></head>'
    )
    with pytest.raises(BadInput, match="new-plugin.js"):
        asv_offline.rewrite_page(html)


def _tgz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, body in members.items():
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return buf.getvalue()


def test_a_vendored_file_must_have_its_pinned_sha256():
    with pytest.raises(VendorError, match="dist/jquery.min.js: sha256"):
        asv_offline.package_files(JQUERY, _tgz({"dist/jquery.min.js": b"not jquery"}))
    with pytest.raises(VendorError, match="no file dist/jquery.min.js"):
        asv_offline.package_files(JQUERY, _tgz({"other.js": b""}))


def test_a_cached_tarball_with_the_wrong_integrity_is_refetched_not_used(tmp_path, monkeypatch):
    (tmp_path / "jquery-3.3.1.tgz").write_bytes(_tgz({"dist/jquery.min.js": b"tampered"}))
    monkeypatch.setattr(asv_offline.shutil, "which", lambda name: None)  # and npm is missing
    with pytest.raises(VendorError, match="npm is not installed"):
        asv_offline.tarball(JQUERY, tmp_path)


def test_no_published_report_exits_2_with_one_line(tmp_path, capsys):
    assert asv_offline.main(["--html-dir", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "run `asv publish` first" in err


# --- in the browser --------------------------------------------------------------------------


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if REQUIRED:
            pytest.fail("chromium is not installed (HARMONY_REF_BROWSER_TESTS=required)")
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    return exe


def committed_machines() -> dict[str, list[Path]]:
    """Machine name -> its committed result files (not machine.json)."""
    return {
        d.name: sorted(p for p in d.glob("*.json") if p.name != "machine.json")
        for d in sorted(RESULTS.iterdir())
        if (d / "machine.json").is_file()
    }


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """`asv publish` of the committed results: (vendored html dir, untouched CDN copy)."""
    exe = _chromium()
    tmp = tmp_path_factory.mktemp("asv-html")
    conf = json.loads((ROOT / "asv.conf.json").read_text())
    conf.update(repo=str(ROOT), results_dir=str(RESULTS), html_dir=str(tmp / "html"))
    (tmp / "asv.conf.json").write_text(json.dumps(conf))
    proc = subprocess.run(
        [sys.executable, "-m", "asv", "publish", "--config", str(tmp / "asv.conf.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    shutil.copytree(tmp / "html", tmp / "cdn")
    try:
        asv_offline.vendor(tmp / "html")
    except VendorError as e:
        if REQUIRED:
            raise
        pytest.skip(f"cannot vendor the report's scripts here: {e}")
    return exe, tmp / "html", tmp / "cdn"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _serve(directory: Path):
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(directory))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _browse(exe: str, directory: Path, fragment: str, *what: str) -> subprocess.CompletedProcess:
    server = _serve(directory)
    url = f"http://127.0.0.1:{server.server_address[1]}/index.html#{fragment}"
    try:
        with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
            return subprocess.run(
                [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *what, url],
                capture_output=True,
                text=True,
                timeout=120,
            )
    finally:
        server.shutdown()
        server.server_close()


def _dom(exe, directory, fragment) -> str:
    proc = _browse(exe, directory, fragment, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def plotted_columns(png: Path) -> float:
    """Share of the plot area's pixel columns that hold a coloured (series) pixel. asv draws its
    axes, grid and text in greys; flot draws each series in a colour. A page with no graph
    ("No graphs to load", an error) scores 0; a line through the history scores near 1."""
    from PIL import Image

    img = Image.open(png).convert("RGB")
    w, h = img.size
    # asv's graph sits right of its 200 px navigation and below the 55 px navbar; the bottom
    # 120 px are the overview strip.
    left, top, right, bottom = 240, 110, w - 40, h - 120
    px = img.load()
    hit = 0
    for x in range(left, right):
        for y in range(top, bottom):
            r, g, b = px[x, y]
            if max(r, g, b) - min(r, g, b) > 60:
                hit += 1
                break
    return hit / (right - left)


def test_without_vendoring_the_page_fails_offline(published):
    """The control: the same report, CDN tags kept, shows asv's error page in this browser."""
    exe, _, cdn = published
    dom = _dom(exe, cdn, GRAPHED_BENCHMARK)
    assert "failed to load" in dom


@pytest.mark.parametrize("machine", sorted(committed_machines()))
def test_offline_page_draws_the_committed_history_of_each_machine(published, machine, tmp_path):
    exe, html, _ = published
    files = committed_machines()[machine]
    commits = {json.loads(p.read_text())["commit_hash"] for p in files}
    assert len(commits) >= 2, f"{machine}: results of {len(commits)} commit(s); a history needs 2"
    with_metric = [
        p.name for p in files if GRAPHED_BENCHMARK in json.loads(p.read_text())["results"]
    ]
    assert len(with_metric) >= 2, f"{machine}: {GRAPHED_BENCHMARK} in {with_metric} only"

    fragment = f"{GRAPHED_BENCHMARK}?machine={machine}"
    dom = _dom(exe, html, fragment)
    assert "failed to load" not in dom
    main_graph = dom[dom.index('id="main-graph"') : dom.index('id="overview"')]
    assert "No graphs to load" not in main_graph, f"{machine}: asv drew no graph"
    assert 'class="flot-base"' in main_graph and "flot-tick-label" in main_graph

    png = tmp_path / "graph.png"
    proc = _browse(exe, html, fragment, f"--screenshot={png}")
    assert proc.returncode == 0 and png.is_file(), proc.stderr[-2000:]
    share = plotted_columns(png)
    assert share > 0.5, f"{machine}: series drawn across {share:.0%} of the plot (screenshot {png})"


def test_the_screenshot_check_sees_a_blank_graph(published, tmp_path):
    """plotted_columns is 0 on the page of a benchmark that has no results."""
    exe, html, _ = published
    png = tmp_path / "none.png"
    proc = _browse(exe, html, "bench_nothing.Nothing.track_nothing", f"--screenshot={png}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert plotted_columns(png) < 0.05
