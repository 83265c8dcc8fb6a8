"""The README and the documentation site stay true:

- the generated reference covers every command's every option and every field the TOML
  validators accept (tools/docs_reference.py; no mkdocs needed);
- the README is short, its relative links resolve, and its `harmony-ref run` excerpt is what the
  command prints now (predicted metrics: exact);
- `mkdocs build --strict` passes (skipped without the `docs` extra), and the built site opens in
  headless Chromium with its navigation and a generated CLI page (skipped without chromium;
  `.ci/run` sets HARMONY_REF_BROWSER_TESTS=required, where a missing browser fails, as in
  tests/test_asv_offline.py).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
REQUIRED = os.environ.get("HARMONY_REF_BROWSER_TESTS") == "required"
sys.path.insert(0, str(ROOT))
from tools import docs_reference  # noqa: E402


@pytest.fixture(scope="module")
def pages():
    return docs_reference.pages()


def test_cli_reference_names_every_command_and_option(pages):
    from harmony_ref.cli import build_parser

    text = pages["reference/cli.md"]
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert len(sub.choices) >= 20
    for name, parser in sub.choices.items():
        section = text.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for opt in action.option_strings:
                assert f"`{opt}`" in section, (name, opt)


def _fields(cls):
    import typing

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.init:
            yield f.name, hints[f.name]


@pytest.mark.parametrize(
    "page, dotted",
    [
        ("reference/profile.md", "harmony_ref.device.soc:DeviceProfile"),
        ("reference/runtime.md", "harmony_ref.device.runtime:RuntimeProfile"),
        ("reference/model-spec.md", "harmony_ref.model.spec:ModelSpec"),
        ("reference/session.md", "harmony_ref.lab.session_spec:SessionSpec"),
    ],
)
def test_toml_reference_lists_every_field_of_every_table(pages, page, dotted):
    import importlib

    mod, _, name = dotted.partition(":")
    cls = getattr(importlib.import_module(mod), name)
    sections = docs_reference.dataclass_sections(cls)
    text = pages[page]
    for title, _doc, rows in sections:
        assert f"### {title}\n" in text, title
        body = text.split(f"### {title}\n", 1)[1].split("\n### ", 1)[0]
        assert [r[0] for r in rows] == [n for n, _ in _fields(_cls_of(cls, title))]
        for field_name, *_ in rows:
            assert f"| `{field_name}` |" in body, (title, field_name)


def _cls_of(cls, title: str):
    """The dataclass behind a section title ("Top level", "`[cpu]`", "`[[cpu.clusters]]`")."""
    if title == "Top level":
        return cls
    path = title.strip("`[]").split(".")
    for part in path:
        cls = docs_reference._nested(dict(_fields(cls))[part])[0]
    return cls


def test_policy_and_grid_references_follow_the_validators(pages):
    from harmony_ref.quant import compress, policy
    from harmony_ref.sweep import grid

    text = pages["reference/policy.md"]
    for key in policy.POLICY_KEYS | compress.PRUNE_KEYS | compress.ACTIVATION_KEYS:
        assert f"| `{key}` |" in text, key
    for key in grid.GRID_FIELDS:
        assert f"| `{key}` |" in pages["reference/grid.md"], key
    # a key the validator accepts but the docs do not describe fails the build
    with pytest.raises(ValueError, match="without a description"):
        docs_reference._checked(
            policy.POLICY_KEYS | {"new_field"}, policy.POLICY_FIELD_DOCS, "policy"
        )


def test_readme_is_short_and_its_links_resolve():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [u for u in links if "://" not in u]
    assert local, "the README links into docs/"
    for url in local:
        assert (ROOT / url).exists(), url


def _table_rows(text: str) -> dict[str, tuple[str, ...]]:
    """A rich table's body rows: metric -> its cells."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("│") and line.endswith("│"):
            cells = tuple(c.strip() for c in line.strip("│").split("│"))
            out[cells[0]] = cells
    return out


def test_readme_run_excerpt_is_what_run_prints():
    from harmony_ref.cli import main

    text = README.read_text()
    block = text.split("## What `harmony-ref run` prints", 1)[1].split("```text\n", 1)[1]
    block = block.split("```", 1)[0]
    argv = (
        re.search(
            r"`harmony-ref (run [^`]*)`",
            text.split("```text", 1)[0].split("## What `harmony-ref run` prints", 1)[1],
        )
        .group(1)
        .split()
    )
    shown = _table_rows(block)
    assert len(shown) >= 5
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(argv) == 0
    printed = _table_rows(out.getvalue())
    for metric, cells in shown.items():
        assert printed.get(metric) == cells, (metric, cells, printed.get(metric))


def test_readme_compare_examples_draw_its_figures(tmp_path):
    """The README's "Compare phones" commands: real SoCs held on one runtime, then one phone
    across runtimes; each run now draws the committed figure of the same name
    (results/figures/), pixel for pixel up to anti-aliasing, and the README shows both."""
    import matplotlib.image
    import numpy as np

    from harmony_ref.cli import main

    text = README.read_text()
    block = text.split("**Compare phones.**", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split()[1:] for line in block.splitlines() if line.startswith("harmony-ref")]
    assert len(commands) == 2
    socs = commands[0][commands[0].index("--profiles") + 1].split(",")
    assert len(socs) >= 3 and not any(p.startswith("harmony-") for p in socs)
    assert commands[0][commands[0].index("--runtime") + 1] == "llama.cpp-cpu"
    pairs = commands[1][commands[1].index("--profiles") + 1].split(",")
    assert len({p.split(":")[0] for p in pairs}) == 1 and len({p.split(":")[1] for p in pairs}) > 2
    for argv in commands:
        name = argv[argv.index("--plot") + 1]
        committed = ROOT / "results" / "figures" / name
        assert f"](results/figures/{name})" in text, name
        argv = [*argv, "--json"]
        argv[argv.index("--plot") + 1] = str(tmp_path / name)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main(argv) == 0
        new, old = (matplotlib.image.imread(p) for p in (tmp_path / name, committed))
        assert new.shape == old.shape, name
        assert float(np.abs(new - old).mean()) < 0.002, f"{committed}: rerun the README command"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e .[docs])")
    pytest.importorskip("material", reason="mkdocs-material is not installed (the docs extra)")
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "WARNING" not in proc.stderr, proc.stderr[-3000:]
    return out


def test_site_builds_strict_with_every_page(site):
    for rel in (
        "index.html",
        "tutorial.html",
        "reference/cli.html",
        "reference/profile.html",
        "reference/policy.html",
        "reference/grid.html",
        "reference/session.html",
        "reference/record.html",
        "explanations/fidelity.html",
        "explanations/accuracy.html",
        "explanations/decoders.html",
        "figures/compare.png",
        "figures/compare-runtimes.png",
    ):
        assert (site / rel).is_file(), rel


def _chromium() -> str:
    import shutil

    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        if REQUIRED:
            pytest.fail("chromium is not installed (HARMONY_REF_BROWSER_TESTS=required)")
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    return exe


def _dom(site: Path, page: str) -> str:
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    exe = _chromium()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(site))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/{page}"
    try:
        with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
            proc = subprocess.run(
                [
                    exe,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                    "--virtual-time-budget=5000",
                    f"--user-data-dir={profile}",
                    "--dump-dom",
                    url,
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_built_cli_page_opens_in_chromium_with_navigation(site):
    from harmony_ref.cli import build_parser

    dom = _dom(site, "reference/cli.html")
    # the navigation: every section and the reference pages, with links that resolve
    assert "md-nav--primary" in dom and 'class="md-content"' in dom, dom[:2000]
    nav = dom.split("md-nav--primary", 1)[1].split('class="md-content"', 1)[0]
    for label in (
        "Tutorial",
        "How-to guides",
        "Explanations",
        "Reference",
        "Command line",
        "Device profile TOML",
        "Policy TOML",
        "Device session TOML",
    ):
        assert label in nav, label
    for href in set(re.findall(r'href="([^"#:]+\.html)"', nav)):
        assert (site / "reference" / href).resolve().is_file(), href
    # the generated page: a section per command, the rendered options table
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name in sub.choices:
        assert f'id="{name}"' in dom, name
    gate = dom.split('id="gate"', 1)[1].split("<h2 ", 1)[0]
    assert "<table>" in gate and "--baseline" in gate and "required" in gate
    # the page's title as the browser renders it
    assert re.search(r"<title>Command line[^<]*harmony-ref</title>", dom), re.search(
        r"<title>[^<]*</title>", dom
    )


def _marked_rows(page: Path, marker: str) -> list[str]:
    block = page.read_text().split(f"<!-- {marker} -->")[1].split(f"<!-- /{marker} -->")[0]
    return [line for line in block.splitlines() if line.startswith("|")]


def test_compression_tables_are_the_tools_output_of_the_committed_runs():
    """docs/explanations/compression.md's three tables are `tools/compress_table.py markdown`
    and `minilm-markdown` of the committed results/compress/*.json (accuracy is exact for a
    given machine, the timings measured once: only the copy is checked)."""
    from tools import compress_table as ct

    page = ROOT / "docs" / "explanations" / "compression.md"
    res = ROOT / "results" / "compress"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ct.markdown(
            argparse.Namespace(
                accuracy=res / "smollm2_accuracy.json", speed=res / "smollm2_speed.json"
            )
        )
    printed = [line for line in out.getvalue().splitlines() if line.startswith("|")]
    assert printed == _marked_rows(page, "compress table") + _marked_rows(page, "calibration table")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ct.minilm_markdown(argparse.Namespace(minilm=res / "minilm_prune.json"))
    printed = [line for line in out.getvalue().splitlines() if line.startswith("|")]
    assert printed == _marked_rows(page, "minilm prune table")
