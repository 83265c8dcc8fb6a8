"""MkDocs hooks (mkdocs.yml `hooks:`): the reference pages generated from the code at every build,
the committed figures served from results/figures/, and optional pages put into the navigation
when their file exists.

- on_files: add tools/docs_reference.py's pages (reference/cli.md, the TOML field references,
  the record schema) and results/figures/*.png as figures/*.png; nothing generated is written
  into docs/.
- on_config: OPTIONAL_NAV pages that exist in docs/ join their nav section (pages other branches add;
  absent, nothing is listed and the strict build has no broken nav entry).
"""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File

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


def on_config(config):
    """OPTIONAL_NAV pages whose file exists join their nav section (before the nav is built, so
    the strict build's check for pages left out of the nav sees them)."""
    docs = Path(config["docs_dir"])
    for entry in config["nav"] or []:
        if not isinstance(entry, dict):
            continue
        ((title, children),) = entry.items()
        listed = {next(iter(c.values())) if isinstance(c, dict) else c for c in children}
        for page_title, rel in OPTIONAL_NAV.get(title, []):
            if (docs / rel).is_file() and rel not in listed:
                children.append({page_title: rel})
    return config
