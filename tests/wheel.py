"""The appliance as `pip wheel .` builds it, installed into a fresh virtual environment: the session
fixtures `appliance_wheel` and `installed_appliance` (tests/conftest.py imports them).

The wheel is built once per test session, pytest-xdist workers included (they share it through a lock
file), from a copy of the repository's folders a wheel is made of, so the build writes nothing into the
checkout. A venv made for it installs the wheel alone (`--no-deps`): a .pth file lends it the test venv's
packages, which the lock file pinned, through a folder of links to them, without the checkout's editable
install of the appliance and, where asked, without the packages of the extra `simulation`. Its commands
run from an empty working directory, so nothing can come from the checkout.
"""

import fcntl
import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent
# What a wheel is built from: pyproject.toml and the folders it names (nothing else is copied).
SOURCES = ("pyproject.toml", "README.md", "appliance", "templates", "playbooks", "firmware", "docs", "mkdocs.yml")
# The distributions of the extra `simulation` (pyproject.toml).
SIMULATION_EXTRA = ("sushy-tools", "libvirt-python", "bcrypt", "nvidia-nvml-dev")


@dataclass(frozen=True)
class Installed:
    venv: Path
    command: Path  # the wheel's console script `appliance`
    site_packages: Path
    cwd: Path  # an empty directory to run commands from


def _shared_dir(tmp_path_factory) -> Path:
    """A folder every worker of this session sees (the workers' base folders share their parent)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "appliance-wheel"


def build_wheel(destination: Path) -> Path:
    """`pip wheel --no-deps .` on a copy of the sources; returns the wheel."""
    source = destination / "source"
    shutil.rmtree(source, ignore_errors=True)  # what a failed build of another worker left
    for name in SOURCES:
        path = CHECKOUT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, source / name)
    dist = destination / "dist"
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q",
                             "-w", str(dist), str(source)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    wheels = list(dist.glob("appliance_suite-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def _lent_packages(folder: Path, without: tuple[str, ...]) -> Path:
    """A folder of links to the test venv's site-packages, less the checkout's editable install and the
    top-level entries of the distributions `without`."""
    site_packages = Path(sysconfig.get_paths()["purelib"])
    left_out = set()
    for name in ("appliance-suite", *without):
        files = importlib.metadata.distribution(name).files or []
        left_out |= {file.parts[0] for file in files if file.parts[0] not in ("..", "__pycache__")}
    folder.mkdir(parents=True)
    for entry in site_packages.iterdir():
        if entry.name not in left_out and not entry.name.startswith("__editable__"):
            (folder / entry.name).symlink_to(entry)
    return folder


def _lend_scripts(bin_dir: Path) -> None:
    """The lent packages' console scripts (ansible-playbook, celery, ...) in the venv's bin/, run by the venv's
    interpreter, as installing those packages there would have written them."""
    own_bin = Path(sys.executable).parent
    shebang = f"#!{own_bin / 'python'}".encode()  # python, python3, python3.11
    for script in own_bin.iterdir():
        target = bin_dir / script.name
        if target.exists() or not script.is_file() or script.is_symlink():
            continue
        with open(script, "rb") as handle:
            first, rest = handle.readline(), handle.read()
        if first.rstrip().startswith(shebang):
            target.write_bytes(f"#!{bin_dir / 'python'}\n".encode() + rest)
            target.chmod(0o755)


def install(wheel: Path, destination: Path, without: tuple[str, ...] = ()) -> Installed:
    """A fresh venv at `destination` with `wheel` installed and the test venv's packages lent to it."""
    venv = destination / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site_packages = venv / "lib" / version / "site-packages"
    lent = _lent_packages(destination / "lent-packages", without)
    (site_packages / "lent-packages.pth").write_text(f"{lent}\n")
    result = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                             "--no-deps", "--disable-pip-version-check", "-q", str(wheel)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    _lend_scripts(venv / "bin")
    cwd = destination / "cwd"
    cwd.mkdir()
    return Installed(venv=venv, command=venv / "bin" / "appliance", site_packages=site_packages, cwd=cwd)


@pytest.fixture(scope="session")
def appliance_wheel(tmp_path_factory) -> Path:
    """The wheel of this checkout, built once for the whole session."""
    shared = _shared_dir(tmp_path_factory)
    shared.mkdir(parents=True, exist_ok=True)
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = sorted((shared / "dist").glob("appliance_suite-*.whl"))
        return built[0] if built else build_wheel(shared)


@pytest.fixture(scope="session")
def installed_appliance(appliance_wheel, tmp_path_factory) -> Installed:
    """The wheel installed with its extra `simulation` (the README's bootstrap installs it)."""
    return install(appliance_wheel, tmp_path_factory.mktemp("installed-appliance"))
