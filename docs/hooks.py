"""MkDocs hooks (mkdocs.yml `hooks:`): the reference pages generated from the code at every build,
the committed figures served from results/figures/, and optional pages put into the navigation
when their file exists.

- on_files: add tools/docs_reference.py's pages (reference/cli.md, the TOML field references,
  the record schema) and results/figures/*.png as figures/*.png; nothing generated is written
  into docs/.
- on_nav: OPTIONAL_NAV pages that exist in docs/ join their section (pages other branches add;
  absent, nothing is listed and the strict build has no broken nav entry).
"""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File
from mkdocs.structure.nav import Section
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[1]
# section title in mkdocs.yml -> [(page title, docs-relative path)], appended when the file exists
OPTIONAL_NAV = {
    "How-to guides": [("Export a GGUF", "export-gguf.md")],
    "Explanations": [("Quantization methods", "quantization-methods.md")],
}


def on_files(files, config):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tools.docs_reference import pages

    for rel, text in pages().items():
        files.append(File.generated(config, rel, content=text))
    for png in sorted((ROOT / "results" / "figures").glob("*.png")):
        files.append(File.generated(config, f"figures/{png.name}", abs_src_path=str(png)))
    return files


def on_nav(nav, config, files):
    for section in nav.items:
        if not isinstance(section, Section) or section.title not in OPTIONAL_NAV:
            continue
        for title, rel in OPTIONAL_NAV[section.title]:
            f = files.get_file_from_path(rel)
            if f is None or any(getattr(c, "file", None) is f for c in section.children):
                continue
            page = f.page if f.page is not None else Page(title, f, config)
            page.parent = section
            section.children.append(page)
            nav.pages.append(page)
    return nav
