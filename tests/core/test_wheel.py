"""The install a production controller runs: the lock files, and the wheel `pip wheel .` builds.

- every dependency of pyproject.toml (and of its extras) is pinned in the lock file that installs it, with
  hashes, within pyproject's range, and the three lock files agree on every version;
- the wheel carries the portal's templates and static files, the playbooks with the collection, the
  firmware baselines, the demo site, simnvml.c and the translations, and the console command `appliance`;
- installed into a fresh venv without the extra `simulation`, run from an empty directory, it reads its
  files from the installed package and refuses the simulated bootstrap with one message naming the extra,
  before changing anything.

The full demo bootstrap through the installed wheel's `appliance` command (with the extra) is
tests/provisioning/test_bootstrap_demo.py.
"""

import json
import os
import re
import subprocess
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.wheel import CHECKOUT, SIMULATION_EXTRA, install

# Nothing here depends on the database backend (the installed appliance runs on its embedded SQLite).
pytestmark = pytest.mark.sqlite_only

LOCK_DIR = CHECKOUT / ".requirements"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def locked(name: str) -> dict[str, tuple[str, int]]:
    """{canonical name: (version, number of sha256 hashes)} of a lock file."""
    pins, current = {}, None
    for line in (LOCK_DIR / name).read_text().splitlines():
        match = PIN.match(line)
        if match:
            current = canonicalize_name(match[1])
            pins[current] = (match[2], 0)
        elif current and line.strip().startswith("--hash=sha256:"):
            version, hashes = pins[current]
            pins[current] = (version, hashes + 1)
        elif not line.startswith(" "):
            current = None
    return pins


def test_the_lock_files_pin_every_dependency_with_hashes():
    project = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]
    runtime = [Requirement(text) for text in project["dependencies"]]
    simulation = [Requirement(text) for text in project["optional-dependencies"]["simulation"]]
    test = [Requirement(text) for text in project["optional-dependencies"]["test"]
            if canonicalize_name(Requirement(text).name) != "appliance-suite"]
    files = {"runtime.txt": runtime, "simulation.txt": runtime + simulation, "test.txt": runtime + simulation + test}
    every = {}
    for name, requirements in files.items():
        pins = locked(name)
        for requirement in requirements:
            key = canonicalize_name(requirement.name)
            assert key in pins, f".requirements/{name}: {requirement.name} is not pinned (run bash .ci/lock)"
            version, hashes = pins[key]
            assert requirement.specifier.contains(version, prereleases=True), \
                f".requirements/{name}: {key}=={version} is outside pyproject's {requirement} (run bash .ci/lock)"
        for key, (version, hashes) in pins.items():
            assert hashes >= 1, f".requirements/{name}: {key}=={version} has no hash"
            assert every.setdefault(key, version) == version, f"{key}: {every[key]} in one lock file, {version} in {name}"
    # A production controller gets no simulation package; the pins are the versions the suite was tested on.
    assert "sushy-tools" not in locked("runtime.txt") and "bcrypt" not in locked("runtime.txt")
    assert locked("simulation.txt")["sushy-tools"][0] == locked("test.txt")["sushy-tools"][0]
    assert locked("runtime.txt")["django"][0].startswith("5.2.")
    assert locked("runtime.txt")["ansible-core"][0].startswith("2.19.")


def tracked(*folders: str) -> list[str]:
    listing = subprocess.run(["git", "ls-files", "-z", "--", *folders], cwd=CHECKOUT, capture_output=True, check=True)
    return [name for name in listing.stdout.decode().split("\0") if name]


@pytest.mark.slow
def test_the_wheel_carries_every_file_and_the_command(appliance_wheel):
    archive = zipfile.ZipFile(appliance_wheel)
    names = set(archive.namelist())
    for expected in (
        "appliance/_data/templates/base.html",
        "appliance/_data/templates/drf_spectacular/redoc.html",
        "appliance/_data/playbooks/site.yml",
        "appliance/_data/playbooks/ansible.cfg",
        "appliance/_data/playbooks/collections/ansible_collections/appliance/hgx/galaxy.yml",
        "appliance/_data/playbooks/collections/ansible_collections/appliance/hgx/meta/runtime.yml",
        "appliance/_data/playbooks/collections/ansible_collections/appliance/hgx/plugins/modules/redfish_bios.py",
        "appliance/_data/firmware/platforms/hgx-h100-8gpu.yaml",
        "appliance/_data/firmware/registries/dell-xe9680-bios.yaml",
        "appliance/inventory/sites/demo.yml",
        "appliance/simulation/nvml/simnvml.c",
        "appliance/portal/static/js/htmx.min.js",
        "appliance/portal/static/css/appliance.css",
        "appliance/portal/static/img/favicon.svg",
        "appliance/locale/ru/LC_MESSAGES/django.mo",
        "appliance/locale/ru/LC_MESSAGES/django.po",
        "appliance/cli.py",
    ):
        assert expected in names, expected
    # Every file of the repository's data folders and of the package, at its place.
    for name in tracked("templates", "playbooks", "firmware"):
        assert f"appliance/_data/{name}" in names, name
    for name in tracked("appliance"):
        assert name in names, name
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
    info = next(name.split("/")[0] for name in names if name.endswith(".dist-info/METADATA"))
    assert "[console_scripts]\nappliance = appliance.cli:main" in archive.read(f"{info}/entry_points.txt").decode()
    metadata = archive.read(f"{info}/METADATA").decode().splitlines()
    for line in ("Requires-Dist: requests>=2.32", "Requires-Dist: PyYAML>=6.0", "Provides-Extra: simulation",
                 'Requires-Dist: sushy-tools>=2.2; extra == "simulation"',
                 'Requires-Dist: nvidia-nvml-dev>=13.0; extra == "simulation"'):
        assert line in metadata, line
    assert not [line for line in metadata if line.startswith(("Requires-Dist: sushy-tools", "Requires-Dist: bcrypt",
                                                              "Requires-Dist: libvirt")) and "extra ==" not in line]


@pytest.fixture(scope="module")
def without_simulation(appliance_wheel, tmp_path_factory):
    return install(appliance_wheel, tmp_path_factory.mktemp("without-simulation"), without=SIMULATION_EXTRA)


def appliance(installed, state: Path, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "APPLIANCE_STATE_DIR": str(state)}
    for name in ("DATABASE_URL", "PYTHONPATH"):
        env.pop(name, None)
    return subprocess.run([str(installed.command), *args], cwd=installed.cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.slow
def test_installed_without_the_extra_it_reads_its_files_and_refuses_the_simulation(without_simulation, tmp_path):
    site_packages = without_simulation.site_packages
    script = ("import json, os; from django.conf import settings; from django.template.loader import get_template; "
              "from appliance.core import resources; import appliance.simulation.services; "
              "print(json.dumps({'base': str(settings.BASE_DIR), 'template': get_template('base.html').origin.name, "
              "'collection': str(settings.COLLECTION_DIR), 'demo': str(settings.DEMO_SITE), "
              "'state': str(settings.STATE_DIR), 'unset': str(resources.default_state_dir()), 'root': os.geteuid() == 0}))")
    shown = appliance(without_simulation, tmp_path / "state", "shell", "-c", script)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    paths = json.loads(shown.stdout.strip().splitlines()[-1])
    assert paths["base"] == str(site_packages / "appliance" / "_data")
    assert paths["template"] == str(site_packages / "appliance" / "_data" / "templates" / "base.html")
    assert Path(paths["collection"]) == site_packages / "appliance/_data/playbooks/collections/ansible_collections/appliance/hgx"
    assert paths["demo"] == str(site_packages / "appliance" / "inventory" / "sites" / "demo.yml")
    assert paths["state"] == str(tmp_path / "state")
    # Without APPLIANCE_STATE_DIR an installed wheel keeps its state outside site-packages.
    home = os.path.expanduser("~")
    assert paths["unset"] == ("/var/lib/appliance" if paths["root"] else os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state"), "appliance"))

    refused = appliance(without_simulation, tmp_path / "refused", "bootstrap", "--no-input")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert ("the simulated appliance needs the packages of the extra 'simulation', and sushy-tools, libvirt-python, "
            "bcrypt, nvidia-nvml-dev are not installed: pip install 'appliance-suite[simulation]'") in refused.stderr
    assert "Traceback" not in refused.stderr
    # Refused before any change: the database was never migrated.
    assert (tmp_path / "refused" / "appliance.sqlite3").stat().st_size == 0
