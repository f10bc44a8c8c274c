"""Build of the simulated NVML library (simnvml.c) into `libnvidia-ml.so.1`.

Built on first use into settings.SIMULATION_DIR/lib/ (STATE_DIR/simulation/lib by default) and rebuilt whenever the C source, the
nvml.h it compiles against or the interpreter it calls back into changes (their digest is stored next
to the library). The compile goes to a temporary name that is renamed into place, so a process that
has the old library open keeps it and no process ever sees half a file.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("simnvml.c")
RUNNER = Path(__file__).resolve().parents[1] / "tools" / "runner.py"
LIBRARY_NAME = "libnvidia-ml.so.1"


class BuildError(Exception):
    pass


def nvml_header() -> Path:
    """nvml.h from NVIDIA's nvidia-nvml-dev wheel in this interpreter's site-packages."""
    import nvidia

    for base in nvidia.__path__:
        for candidate in sorted(Path(base).glob("*/include/nvml.h"), reverse=True):
            return candidate
    raise BuildError("nvml.h not found: install the nvidia-nvml-dev wheel (the extra 'simulation')")


def library_dir() -> Path:
    from django.conf import settings

    return Path(settings.SIMULATION_DIR) / "lib"


def node_python() -> str:
    """The interpreter the library runs the simulation's writes with: the node's system Python (the
    library is loaded by the node's login account, which cannot run the controller's)."""
    return "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def node_runner() -> Path:
    """runner.py as the node sees it: the copy of the simulated commands in SIMULATION_DIR/tools."""
    from django.conf import settings

    copy = Path(settings.SIMULATION_DIR) / "tools" / "appliance" / "simulation" / "tools" / "runner.py"
    return copy if copy.exists() else RUNNER


def _digest(header: Path) -> str:
    digest = hashlib.sha256()
    for part in (SOURCE.read_bytes(), header.read_bytes(), node_python().encode(), str(node_runner()).encode()):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()


def build(target_dir: Path | None = None) -> Path:
    directory = target_dir or library_dir()
    directory.mkdir(parents=True, exist_ok=True)
    header = nvml_header()
    library = directory / LIBRARY_NAME
    stamp = directory / (LIBRARY_NAME + ".sha256")
    expected = _digest(header)
    with open(directory / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if library.exists() and stamp.exists() and stamp.read_text().strip() == expected:
            return library
        fd, temporary = tempfile.mkstemp(dir=directory, prefix=".libnvidia-ml.", suffix=".so")
        os.close(fd)
        command = [
            "gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-std=gnu11",
            f"-Wl,-soname,{LIBRARY_NAME}", f"-I{header.parent}",
            f'-DSIM_PYTHON="{node_python()}"', f'-DSIM_RUNNER="{node_runner()}"',
            "-o", temporary, str(SOURCE), "-lpthread",
        ]
        try:
            result = subprocess.run(command, capture_output=True, text=True, check=False)
        except FileNotFoundError:
            os.unlink(temporary)
            raise BuildError("gcc not found: the simulated NVML library is compiled on first use") from None
        if result.returncode != 0:
            os.unlink(temporary)
            raise BuildError(f"{SOURCE}: compile failed:\n{result.stderr.strip()}")
        os.chmod(temporary, 0o755)
        os.replace(temporary, library)
        stamp.write_text(expected + "\n")
    return library


_built: dict[tuple, Path] = {}


def library_path() -> Path:
    """The simulated libnvidia-ml.so.1, built if missing or out of date. Asked for once per node and
    stage: the digest is only recomputed when the source's or the library's timestamps move."""
    directory = library_dir()
    library = directory / LIBRARY_NAME
    try:
        key = (str(directory), SOURCE.stat().st_mtime_ns, library.stat().st_mtime_ns)
    except FileNotFoundError:
        key = None
    if key is not None and key in _built:
        return _built[key]
    path = build(directory)
    _built[(str(directory), SOURCE.stat().st_mtime_ns, path.stat().st_mtime_ns)] = path
    return path
