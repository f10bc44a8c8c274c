"""The documentation site (docs/ and mkdocs.yml, carried by the wheel as appliance/_data/), built on the
appliance itself into its state directory and served at /docs/ by views_docs: an air-gapped portal has no
other documentation to send its users to.

`build()` runs MkDocs in this process (its hook generates the reference tables from this very code) into a
new folder beside the site and swaps it in, so a reader never sees half a site. `ensure_built()` builds
when the site is missing or was built from other sources or another version (an upgrade); `appliance docs
build` forces a build.

The theme writes a few small inline scripts into every page (where its local storage lives, the reader's
saved colour palette, a tab chosen by the address's fragment). The portal's Content-Security-Policy allows
no inline script; the build records the SHA-256 of every inline script of the built site
(`SCRIPT_HASHES_NAME`, `script_hashes()`), and /docs/ pages allow exactly those (views_docs), nothing else.
"""

import base64
import fcntl
import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
from html.parser import HTMLParser
from pathlib import Path

from django.conf import settings

from appliance.core import resources

CONFIG_NAME = "mkdocs.yml"
STAMP_NAME = ".appliance-docs-stamp"
SCRIPT_HASHES_NAME = ".appliance-docs-script-hashes.json"
NOT_SERVED = frozenset({STAMP_NAME, SCRIPT_HASHES_NAME})
# <script type="..."> that a browser runs; any other type (Material's application/json configuration) is data.
SCRIPT_TYPES = frozenset({"", "text/javascript", "application/javascript", "module"})


def source_dir() -> Path:
    """The folder holding mkdocs.yml and docs/: the checkout, or the wheel's data."""
    return resources.DATA_ROOT


def site_dir() -> Path:
    return Path(settings.STATE_DIR) / "docs" / "site"


def stamp() -> str:
    """What the built site depends on: the appliance's version and every file of the sources."""
    digest = hashlib.sha256()
    try:
        digest.update(importlib.metadata.version("appliance-suite").encode())
    except importlib.metadata.PackageNotFoundError:
        digest.update(b"unversioned")
    root = source_dir()
    files = [root / CONFIG_NAME, *sorted(p for p in (root / "docs").rglob("*") if p.is_file())]
    for path in files:
        if "__pycache__" in path.parts:
            continue
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def is_current() -> bool:
    marker = site_dir() / STAMP_NAME
    return (marker.is_file() and marker.read_text() == stamp()
            and (site_dir() / SCRIPT_HASHES_NAME).is_file())  # a site built before the hashes were recorded


class _InlineScripts(HTMLParser):
    """The text of every inline <script> a browser would run, exactly as the page holds it."""

    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.scripts, self._text = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            attributes = dict(attrs)
            runs = (attributes.get("type") or "").strip().lower() in SCRIPT_TYPES
            self._text = [] if runs and "src" not in attributes else None

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "script" and self._text is not None:
            self.scripts.append("".join(self._text))
        if tag == "script":
            self._text = None


def inline_scripts(html: str) -> list[str]:
    parser = _InlineScripts()
    parser.feed(html)
    parser.close()
    return parser.scripts


def csp_hash(script: str) -> str:
    """The CSP source expression of one inline script: 'sha256-<base64 of its UTF-8 text's digest>'."""
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


def record_script_hashes(site: Path) -> list[str]:
    """Hashes every inline script of every page of the built `site` into SCRIPT_HASHES_NAME."""
    hashes = sorted({csp_hash(script) for page in site.rglob("*.html")
                     for script in inline_scripts(page.read_text(encoding="utf-8"))})
    (site / SCRIPT_HASHES_NAME).write_text(json.dumps({"script-src": hashes}, indent=1) + "\n")
    return hashes


def script_hashes(site: Path) -> list[str]:
    """The hashes the build recorded ([] when none were: the portal's own policy, no inline script)."""
    try:
        hashes = json.loads((site / SCRIPT_HASHES_NAME).read_text())["script-src"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [value for value in hashes if isinstance(value, str) and value.startswith("sha256-")
            and all(char.isalnum() or char in "+/=-" for char in value)]


def build() -> Path:
    """Builds the site into the state directory (strict: a broken link fails it) and returns its folder."""
    from mkdocs.commands.build import build as mkdocs_build
    from mkdocs.config import load_config

    target = site_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    with _lock(target.parent):
        fresh = Path(tempfile.mkdtemp(prefix="site-", dir=target.parent))
        try:
            config = load_config(config_file=str(source_dir() / CONFIG_NAME), site_dir=str(fresh), strict=True)
            config.plugins.on_startup(command="build", dirty=False)
            try:
                mkdocs_build(config)
            finally:
                config.plugins.on_shutdown()
            record_script_hashes(fresh)
            (fresh / STAMP_NAME).write_text(stamp())
            os.chmod(fresh, 0o755)
            old = target.with_name("site-old")
            shutil.rmtree(old, ignore_errors=True)
            if target.exists():
                target.rename(old)
            fresh.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(fresh, ignore_errors=True)
            raise
    return target


def ensure_built() -> Path:
    if not is_current():
        build()
    return site_dir()


class _lock:
    """One builder at a time per state directory (several portal processes may ask at once)."""

    def __init__(self, folder: Path):
        self.path = folder / ".build.lock"

    def __enter__(self):
        self.file = open(self.path, "a")  # noqa: SIM115 (held for the build)
        fcntl.flock(self.file, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.file, fcntl.LOCK_UN)
        self.file.close()
