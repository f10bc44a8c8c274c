"""Writing files that hold secrets or must never be seen half-written.

`write_private` replaces a file atomically (readers see the old or the new content, never a mix).
`create_once` makes a file that several processes may race to create (two workers starting at
once): the content is written aside and linked into place, and whoever links first wins; it says
whether this call created it. `private_directory`, `make_private` and `PrivateRotatingFileHandler`
keep the state directory readable by the appliance's OS user only. None imports Django, so
settings.py can use them.
"""

import hashlib
import os
import tempfile
from logging.handlers import RotatingFileHandler
from pathlib import Path


def _write_aside(path: Path, data: bytes, mode: int) -> str:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        os.unlink(temporary)
        raise
    return temporary


def write_private(path: Path, data: bytes | str, mode: int = 0o600) -> None:
    path = Path(path)
    temporary = _write_aside(path, data.encode() if isinstance(data, str) else data, mode)
    os.replace(temporary, path)


def create_once(path: Path, data: bytes | str, mode: int = 0o600) -> bool:
    """Create `path` with `data` unless it exists; True when this call created it."""
    path = Path(path)
    if path.exists():
        return False
    temporary = _write_aside(path, data.encode() if isinstance(data, str) else data, mode)
    try:
        os.link(temporary, path)
        return True
    except FileExistsError:
        return False  # another process won the race: its file is the file
    finally:
        os.unlink(temporary)


def private_directory(path: Path) -> Path:
    """Create `path` (and missing parents) readable by this OS user only; tighten it if it exists."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = path.stat().st_mode
    # Group traversal alone (0710) is kept: the simulation lets its nodes' login account pass (sshd.py).
    if mode & 0o067:
        try:
            os.chmod(path, 0o700)
        except PermissionError:
            raise PermissionError(f"{path}: mode {mode & 0o777:o} lets other users in, and this OS user may not "
                                  "change it: make it 0700 and owned by the appliance's user") from None
    return path


def make_private(*paths: Path) -> None:
    """Take group and other permissions off files that exist (a database made before this rule, its WAL)."""
    for path in paths:
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            continue
        if mode & 0o077:
            os.chmod(path, mode & 0o700)


class PrivateRotatingFileHandler(RotatingFileHandler):
    """A rotating log file created 0600: logs name users, addresses and hosts."""

    def _open(self):
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        make_private(Path(self.baseFilename))
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read a MiB at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
