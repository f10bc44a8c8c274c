"""The build's own step: the repository's top-level data folders go into the wheel (see resources.py).

pyproject.toml names these classes in [tool.setuptools.cmdclass]; setuptools loads this file on its
own, without importing the `appliance` package (whose __init__ needs Celery), so it uses the standard
library and setuptools only. The appliance never imports it at run time.

- build_py copies templates/, playbooks/, firmware/, docs/ and mkdocs.yml into the build's appliance/_data/, so the wheel
  carries them there; an editable install copies nothing (the checkout's folders are read in place).
- sdist puts the same folders into the source archive, so a wheel built from it (`python -m build`)
  carries them too.
"""

import os
from pathlib import Path

from setuptools.command.build_py import build_py as _build_py
from setuptools.command.sdist import sdist as _sdist

# resources.DATA_FOLDERS (not imported: that would import the `appliance` package).
FOLDERS = ("templates", "playbooks", "firmware", "docs")
# Top-level files carried the same way: the documentation site's configuration (appliance/portal/docs.py).
FILES = ("mkdocs.yml",)
TARGET = Path("appliance", "_data")
# Caches that tools write beside the sources: not part of the appliance.
SKIPPED_DIRECTORIES = frozenset({"__pycache__", ".ansible", ".pytest_cache", ".ruff_cache"})
SKIPPED_SUFFIXES = (".pyc", ".pyo")


def data_files(root: Path) -> list[tuple[Path, Path]]:
    """(source, path relative to `root`) of every file of the data folders under `root`, sorted."""
    found = []
    for folder in FOLDERS:
        base = root / folder
        if not base.is_dir():
            raise FileNotFoundError(f"{base}: the folder is missing; the wheel must carry it (appliance/core/packaging.py)")
        for directory, subdirectories, files in os.walk(base):
            subdirectories[:] = sorted(name for name in subdirectories if name not in SKIPPED_DIRECTORIES)
            for name in sorted(files):
                if not name.endswith(SKIPPED_SUFFIXES):
                    source = Path(directory, name)
                    found.append((source, source.relative_to(root)))
    for name in FILES:
        source = root / name
        if not source.is_file():
            raise FileNotFoundError(f"{source}: the file is missing; the wheel must carry it (appliance/core/packaging.py)")
        found.append((source, source.relative_to(root)))
    return found


class BuildPy(_build_py):
    """build_py, then the data folders into <build_lib>/appliance/_data/."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        for source, relative in data_files(Path(os.curdir)):
            target = Path(self.build_lib) / TARGET / relative
            self.mkpath(str(target.parent))
            self.copy_file(str(source), str(target), preserve_mode=True)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        if self.editable_mode:
            return outputs
        return outputs + [str(Path(self.build_lib) / TARGET / relative) for _, relative in data_files(Path(os.curdir))]


class Sdist(_sdist):
    """sdist, with the data folders in the archive at their places in the repository."""

    def make_release_tree(self, base_dir, files) -> None:
        super().make_release_tree(base_dir, files)
        for source, relative in data_files(Path(os.curdir)):
            target = Path(base_dir) / relative
            self.mkpath(str(target.parent))
            self.copy_file(str(source), str(target), preserve_mode=True)
