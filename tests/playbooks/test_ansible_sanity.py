"""The collection appliance.hgx passes `ansible-test sanity` (ansible-core's own checks of a collection:
pylint, pep8, validate-modules, the ignore file, replace-urlopen, ...), run as a collection's maintainers run it.

ansible-test gives each sanity check a virtual environment of its own under $HOME/.ansible/test/venv, made
once with the packages it pins and kept (a marker file) for the next runs, and bootstraps pip into each one
with a get-pip script it downloads from its CI file server. Here:
- $HOME is a folder of the suite's own cache (so the environments are kept between runs and nothing is
  written into the user's ~/.ansible), holding the user's pip configuration (the index or wheelhouse the
  project installs from);
- the pip bootstrap is the interpreter's own bundled pip (ensurepip), saved where ansible-test looks for its
  cached script, so no download from outside the package index ever happens;
- the collection is checked in a copy (ansible-test writes its results under tests/output).
The first run installs ansible-test's pinned packages (pylint, pycodestyle, voluptuous, ... not in the
project's lock file) from the configured index; every later run is offline.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import ansible_test
import pytest

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = ROOT / "playbooks" / "collections" / "ansible_collections" / "appliance" / "hgx"
IGNORES = COLLECTION / "tests" / "sanity" / "ignore-2.19.txt"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def ansible_test_home() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    home = cache / "appliance-suite" / "ansible-test-home"
    # ansible-test's pip version for new environments: it names the cached bootstrap script.
    source = (Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py").read_text()
    pip_version = re.search(r"default_packages = dict\(\s*pip='([0-9.]+)'", source).group(1)
    bootstrap = home / ".ansible" / "test" / "cache" / f"get_pip_{pip_version.replace('.', '_')}.py"
    bootstrap.parent.mkdir(parents=True, exist_ok=True)
    bootstrap.write_text('"""pip for a new sanity environment: the interpreter\'s bundled pip, offline."""\n'
                         "import ensurepip\n\nensurepip.bootstrap(upgrade=True)\n")
    for config in (Path(".config") / "pip" / "pip.conf", Path(".pip") / "pip.conf"):
        if (Path.home() / config).is_file():
            (home / config).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path.home() / config, home / config)
    return home


def test_every_ignore_line_names_one_check_of_one_file_and_says_why():
    lines = IGNORES.read_text().splitlines()
    assert lines, "the ignore file is empty: delete it rather than keep an empty one"
    for line in lines:
        entry, hash_sign, why = line.partition(" # ")
        assert hash_sign and len(why.strip()) >= 20, f"an ignore line without its justification: {line!r}"
        path, check = entry.strip().split(" ")
        assert (COLLECTION / path).is_file(), f"{path} does not exist"
        assert re.fullmatch(r"[a-z0-9-]+(:[a-z0-9-]+)?", check), check
    # Only the license header is waived: every module is Apache-2.0 (galaxy.yml) and carries no GPLv3 text.
    assert {line.split(" ")[1] for line in lines} == {"validate-modules:missing-gplv3-license"}


@pytest.mark.slow
def test_the_collection_passes_ansible_test_sanity(tmp_path):
    copy = tmp_path / "ansible_collections" / "appliance" / "hgx"
    shutil.copytree(COLLECTION, copy, ignore=shutil.ignore_patterns("output", "__pycache__"))
    venv_bin = Path(sys.executable).parent
    completed = subprocess.run(
        [str(venv_bin / "ansible-test"), "sanity", "--python", PYTHON, "--local", "--color", "no"],
        cwd=copy, capture_output=True, text=True, timeout=900,
        env={"PATH": f"{venv_bin}:/usr/bin:/bin", "HOME": str(ansible_test_home())},
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    assert "ERROR" not in output, output
    # The checks that failed before all ran (a check that is skipped prints no line).
    for check in ("ignores", "pep8", "pylint", "replace-urlopen", "validate-modules", "yamllint", "import"):
        assert f'Running sanity test "{check}"' in output, f"{check} did not run:\n{output}"
    assert "Downloading pip" not in output
