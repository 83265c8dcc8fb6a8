"""`python -m tools.asv_offline [--html-dir DIR] [--json]`: make asv's published
report work without internet (run after `asv publish`; `tox -e asv-publish` does both).

asv's `index.html` loads jQuery, flot and three of its plugins, flot-orderbars, stupidtable,
blueimp-md5 and Bootstrap (JS and CSS) from CDNs; without them the page only shows asv's
"external dependencies failed to load" error. This step takes the same files from their npm
packages, pinned below by version, by the tarball's npm integrity (SHA-512) and by each file's
SHA-256, copies them into `<html-dir>/vendor/<package>@<version>/<path in package>`, and rewrites
the page's CDN tags to those local paths. Tarballs come from `npm pack` once and are kept in
$HARMONY_REF_CACHE/npm/, so a machine that fetched them once publishes offline from then on.

Where the npm file is not the CDN file (flot: cdnjs serves a minified build, npm ships the same
0.8.3 source unminified; stupidtable: cdnjs 1.0.1, npm has only 1.1.3 of stupid-table-plugin,
with the same `stupidtable()` / `stupidsort()` API asv calls) the table says so. The other files
are byte-identical to what asv's template names (their SHA-256 equals the template's SRI hash).

Exit codes: 0 vendored, 1 a package could not be fetched or failed its pinned hash, 2 bad input
(no published report, or a template whose CDN tags are not the ones below).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harmony_ref._io import write_bytes_atomic, write_text_atomic

HTML_DIR = Path("results/html")
VENDOR_DIR = "vendor"


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    integrity: str  # npm's dist.integrity of the tarball (sha512, base64)


@dataclass(frozen=True)
class File:
    package: Package
    path: str  # inside the package (the tarball's `package/` prefix dropped)
    sha256: str
    url: str | None  # the CDN address asv's index.html loads it from; None: needed by another file

    @property
    def local(self) -> str:
        return f"{VENDOR_DIR}/{self.package.name}@{self.package.version}/{self.path}"


JQUERY = Package(
    "jquery",
    "3.3.1",
    "sha512-Ubldcmxp5np52/ENotGxlLe6aGMvmF4R8S6tZjsP6Knsaxd/xp3Zrh"
    "50cG93lR6nPXyUFwzN3ZSOQI0wRJNdGg==",
)
FLOT = Package(
    "flot",
    "0.8.3",
    "sha512-xg2otcTJDvS+ERK+my4wxG/ASq90QURXtoM4LhacCq0jQW2jbyjdttbRNqU2"
    "cPykrpMvJ6b2uSp6SAgYAzj9tQ==",
)
ORDERBARS = Package(
    "flot-orderbars",
    "1.0.0",
    "sha512-Jv51fvzevUjNXEeozpwEKfPjhiZhfiJddv0WHjduUT"
    "CmSF+7T5K7C9c9Y1wIVmUhDBv5fLMjgbwKecT0GIKPZA==",
)
STUPIDTABLE = Package(
    "stupid-table-plugin",
    "1.1.3",
    "sha512-2Vk7XouQPxUQPRe9w0Fu7ZZ8kHLK7rDoLMsCgt"
    "KxRNJ7f4dSOGvW9CkHsq5wD6QsaEnWoyLBYH3xOEsrK3yWBg==",
)
MD5 = Package(
    "blueimp-md5",
    "2.19.0",
    "sha512-DRQrD6gJyy8FbiE4s+bDoXS9hiW3Vbx5uCdwvcCf3zLHL+Iv7LtG"
    "HLpr+GZV8rHG8tK766FGYBwRbu8pELTt+w==",
)
BOOTSTRAP = Package(
    "bootstrap",
    "3.1.1",
    "sha512-TAzqS8E/ISpVHP29gYhy+1NSV+FJwApDVQhDfgLYsIuUDJiqJz"
    "H2DfORN5tiu+Ie2iBLrzEG34t4Rf465cigqg==",
)

CDNJS = "https://cdnjs.cloudflare.com/ajax/libs"
JSDELIVR = "https://cdn.jsdelivr.net/npm"
_GLYPHS = "dist/fonts/glyphicons-halflings-regular"

# The files of asv 0.6.4-0.6.6's www/index.html, in the order the page loads them.
FILES = (
    File(
        JQUERY,
        "dist/jquery.min.js",
        "160a426ff2894252cd7cebbdd6d6b7da8fcd319c65b70468f10b6690c45d02ef",
        "https://code.jquery.com/jquery-3.3.1.min.js",
    ),
    # cdnjs serves flot minified; npm ships the 0.8.3 source (same code, not minified)
    File(
        FLOT,
        "jquery.flot.js",
        "b7b931f273c38b1277b9c6c1f4e05c4ec09885a487bddaf3279e2d7e49a38e12",
        f"{CDNJS}/flot/0.8.3/jquery.flot.min.js",
    ),
    File(
        FLOT,
        "jquery.flot.time.js",
        "a582c832adc7138a6b05aaf61f16ebac274701f1be4afea77e739a1c34b9c41a",
        f"{CDNJS}/flot/0.8.3/jquery.flot.time.min.js",
    ),
    File(
        FLOT,
        "jquery.flot.selection.js",
        "e6c85f6c1ebe4b4da29d8ae238c7c5060283f05f7ef054f6b91817d02c092918",
        f"{CDNJS}/flot/0.8.3/jquery.flot.selection.min.js",
    ),
    File(
        FLOT,
        "jquery.flot.categories.js",
        "6e81664b28ea795c734906f4aa15614640a75ac7fbd399a7fb9084040698351a",
        f"{CDNJS}/flot/0.8.3/jquery.flot.categories.min.js",
    ),
    File(
        ORDERBARS,
        "js/jquery.flot.orderBars.js",
        "39735b4f46f96ff4e082572401f47c55a2767b366fd1d1e821e44a8d830a12bf",
        f"{JSDELIVR}/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js",
    ),
    # cdnjs has 1.0.1; npm only 1.1.3 (same stupidtable/stupidsort API)
    File(
        STUPIDTABLE,
        "stupidtable.min.js",
        "4642380f28ebe9ed7cac251793b281ef8620c4386205d92788f9b12f5cceb4e0",
        f"{CDNJS}/stupidtable/1.0.1/stupidtable.min.js",
    ),
    File(
        MD5,
        "js/md5.min.js",
        "64d7ded388c562e4bde9e58ce205e5fa01b9734fcd434d496eb7b4fbfe9b927d",
        f"{CDNJS}/blueimp-md5/2.19.0/js/md5.min.js",
    ),
    File(
        BOOTSTRAP,
        "dist/js/bootstrap.min.js",
        "898d05a17f2cfc5120ddcdba47a885c378c0b466f30f0700e502757e24b403a1",
        f"{JSDELIVR}/bootstrap@3.1.1/dist/js/bootstrap.min.js",
    ),
    File(
        BOOTSTRAP,
        "dist/css/bootstrap.min.css",
        "e9503448692b738dd260fbd7f7cabf2e11f09b600fa97e6eb3a56eba5b1a7e9b",
        f"{JSDELIVR}/bootstrap@3.1.1/dist/css/bootstrap.min.css",
    ),
    # the fonts bootstrap.min.css refers to as ../fonts/
    File(
        BOOTSTRAP,
        f"{_GLYPHS}.eot",
        "f495f34e4f177cf0115af995bbbfeb3fcabc88502876e76fc51a4ab439bc8431",
        None,
    ),
    File(
        BOOTSTRAP,
        f"{_GLYPHS}.svg",
        "d168d50a88c730b4e6830dc0da2a2b51dae4658a77d9619943c27b8ecfc19d1a",
        None,
    ),
    File(
        BOOTSTRAP,
        f"{_GLYPHS}.ttf",
        "bd18efd3efd70fec8ad09611a20cdbf99440b2c1d40085c29be036f891d65358",
        None,
    ),
    File(
        BOOTSTRAP,
        f"{_GLYPHS}.woff",
        "fc969dc1c6ff531abcf368089dcbaf5775133b0626ff56b52301a059fc0f9e1e",
        None,
    ),
)
PACKAGES = tuple(dict.fromkeys(f.package for f in FILES))

# A tag that makes the browser load something: <script src=...> or <link href=...>.
_LOADING_TAG = re.compile(r"<(script|link)\b[^>]*?\b(?:src|href)=\"([^\"]+)\"[^>]*>", re.I)


class VendorError(Exception):
    """A package could not be fetched, or a fetched file is not the pinned one (exit 1)."""


class BadInput(Exception):
    """No published report where asked, or a page this step does not know (exit 2)."""


def npm_integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def default_cache() -> Path:
    from harmony_ref.checkpoint.assets import cache_dir

    return cache_dir() / "npm"


def tarball(pkg: Package, cache: Path) -> bytes:
    """The package's npm tarball, from the cache or `npm pack`, checked against its integrity."""
    cached = cache / f"{pkg.name}-{pkg.version}.tgz"
    if cached.is_file():
        data = cached.read_bytes()
        if npm_integrity(data) == pkg.integrity:
            return data
    npm = shutil.which("npm")
    if npm is None:
        raise VendorError(
            f"{pkg.name}@{pkg.version}: not in {cache} and npm is not installed "
            "(install Node.js and npm, e.g. apt-get install npm)"
        )
    with tempfile.TemporaryDirectory(prefix="harmony-npm-") as tmp:
        proc = subprocess.run(
            [npm, "pack", f"{pkg.name}@{pkg.version}", "--json", "--pack-destination", tmp],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp,
        )
        packed = sorted(Path(tmp).glob("*.tgz"))
        if proc.returncode != 0 or len(packed) != 1:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise VendorError(f"npm pack {pkg.name}@{pkg.version} failed: {tail}")
        data = packed[0].read_bytes()
    got = npm_integrity(data)
    if got != pkg.integrity:
        raise VendorError(
            f"{pkg.name}@{pkg.version}: tarball integrity {got} is not the pinned {pkg.integrity}"
        )
    write_bytes_atomic(cached, data)
    return data


def package_files(pkg: Package, data: bytes) -> dict[str, bytes]:
    """The pinned files of `pkg` out of its tarball, each checked against its SHA-256."""
    import io

    wanted = {f.path: f for f in FILES if f.package == pkg}
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for path, f in wanted.items():
            try:
                member = tar.getmember(f"package/{path}")
            except KeyError:
                raise VendorError(
                    f"{pkg.name}@{pkg.version}: no file {path} in the tarball"
                ) from None
            body = tar.extractfile(member).read()
            got = hashlib.sha256(body).hexdigest()
            if got != f.sha256:
                raise VendorError(
                    f"{pkg.name}@{pkg.version}/{path}: sha256 {got} is not the pinned {f.sha256}"
                )
            out[path] = body
    return out


def rewrite_page(html: str) -> tuple[str, int]:
    """`html` with every CDN tag of FILES pointing at its vendored copy; (page, tags replaced).

    A page that is already rewritten comes back unchanged. BadInput when the page loads
    something from the network that FILES does not cover (a newer asv template)."""
    by_url = {f.url: f for f in FILES if f.url}
    replaced = 0

    def local_tag(m: re.Match) -> str:
        nonlocal replaced
        tag, url = m.group(1).lower(), m.group(2)
        f = by_url.get(url)
        if f is None:
            return m.group(0)
        replaced += 1
        if tag == "link":
            return f'<link rel="stylesheet" href="{f.local}">'
        return f'<script src="{f.local}" onerror="js_load_failure()">'

    page = _LOADING_TAG.sub(local_tag, html)
    remote = remote_loads(page)
    if remote:
        raise BadInput(
            f"the page loads {remote[0]}, which this step does not vendor "
            "(a newer asv template? update FILES in tools/asv_offline.py)"
        )
    return page, replaced


def remote_loads(html: str) -> list[str]:
    """Addresses the page would fetch from the network (scripts and stylesheets)."""
    return [
        m.group(2)
        for m in _LOADING_TAG.finditer(html)
        if re.match(r"(https?:)?//", m.group(2), re.I)
    ]


def vendor(html_dir: Path, cache: Path | None = None) -> dict:
    """Copy FILES into html_dir/vendor/ and point index.html at them. Returns what was done."""
    index = html_dir / "index.html"
    if not index.is_file():
        raise BadInput(f"{index}: not found (run `asv publish` first)")
    html = index.read_text(encoding="utf-8")
    if "js_load_failure" not in html:
        raise BadInput(f"{index}: not a page written by `asv publish` (no js_load_failure)")
    page, replaced = rewrite_page(html)  # checks the page before anything is fetched
    cache = default_cache() if cache is None else cache
    report = []
    for pkg in PACKAGES:
        files = package_files(pkg, tarball(pkg, cache))
        for path, body in files.items():
            write_bytes_atomic(html_dir / File(pkg, path, "", None).local, body)
        report.append(
            {
                "package": pkg.name,
                "version": pkg.version,
                "integrity": pkg.integrity,
                "files": {p: hashlib.sha256(b).hexdigest() for p, b in files.items()},
            }
        )
    write_text_atomic(index, page)
    return {"html_dir": str(html_dir), "tags_replaced": replaced, "packages": report}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.asv_offline", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--html-dir",
        type=Path,
        default=HTML_DIR,
        help="asv's html_dir (default: %(default)s, as in asv.conf.json)",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="where npm tarballs are kept (default: $HARMONY_REF_CACHE/npm)",
    )
    parser.add_argument("--json", action="store_true", help="print what was vendored as JSON")
    args = parser.parse_args(argv)
    try:
        done = vendor(args.html_dir, args.cache)
    except BadInput as e:
        print(f"asv-offline: {e}", file=sys.stderr)
        return 2
    except VendorError as e:
        print(f"asv-offline: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(done, indent=2))
    else:
        n_files = sum(len(p["files"]) for p in done["packages"])
        print(
            f"asv-offline: {n_files} files from {len(done['packages'])} npm packages in "
            f"{args.html_dir / VENDOR_DIR}; {done['tags_replaced']} CDN tags of "
            f"{args.html_dir / 'index.html'} now load them"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
