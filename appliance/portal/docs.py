"""The documentation site (docs/ and mkdocs.yml, carried by the wheel as appliance/_data/), built on the
appliance itself into its state directory and served at /docs/ by views_docs: an air-gapped portal has no
other documentation to send its users to.

`build()` runs MkDocs in this process (its hook generates the reference tables from this very code) into a
new folder beside the site and swaps it in, so a reader never sees half a site. `ensure_built()` builds
when the site is missing or was built from other sources or another version (an upgrade); `appliance docs
build` forces a build.
"""

import fcntl
import hashlib
import importlib.metadata
import os
import shutil
import tempfile
from pathlib import Path

from django.conf import settings

from appliance.core import resources

CONFIG_NAME = "mkdocs.yml"
STAMP_NAME = ".appliance-docs-stamp"


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
    return marker.is_file() and marker.read_text() == stamp()


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
