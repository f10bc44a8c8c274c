"""SHA-256 of every file of a model version, at close to `sha256sum`'s speed.

Each file is read in large blocks into one reused buffer (no new bytes object per block) and hashed while
the GIL is released (hashlib does so for blocks over 2 KiB), several files at once in threads: on a
parallel filesystem or in the page cache the hashing, not the reading, is the limit, and threads use
every core where `sha256sum` uses one.

The files hashed are the ones OpenSSF model-signing's default file serialization hashes for the same
directory (signing.py signs these digests and its verifier re-hashes the directory): every regular file
under the root, paths relative to it, except git's own files at the top (.git/, .gitattributes, .github/,
.gitignore). Special files (pipes, sockets, devices) and symbolic links are refused, as model-signing's
verifier refuses them by default (a link is also how a file out of the model would slip in), each with a
message naming it.

Each file's size, mtime, ctime and inode are taken from the open file before and after it is read: a file that
changed while it was hashed is refused (its digest would describe neither version), and the values are the
baseline of the quick verification (integrity.py), which stats files instead of reading them.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from django.utils.translation import gettext as _

from .errors import LifecycleError

# Files model-signing ignores by default at the top of a model directory (model_signing.hashing.Config).
IGNORED_TOP_LEVEL = frozenset({".git", ".gitattributes", ".github", ".gitignore"})
MAX_FILES = 100_000
BLOCK_SIZE = 4 << 20  # 4 MiB a read: large enough that the per-call overhead vanishes, small for the cache
_local = threading.local()


@dataclass(frozen=True)
class FileDigest:
    path: str  # relative to the root, POSIX separators
    size: int
    sha256: str
    mtime_ns: int
    inode: int
    ctime_ns: int | None = None

    def as_dict(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256, "mtime_ns": self.mtime_ns,
                "inode": self.inode, "ctime_ns": self.ctime_ns}


def _buffer() -> memoryview:
    view = getattr(_local, "buffer", None)
    if view is None:
        view = _local.buffer = memoryview(bytearray(BLOCK_SIZE))
    return view


def hash_file(path: Path, relative: str) -> FileDigest:
    """Digest of one regular file; LifecycleError("source: ...") when it is not one or changes meanwhile."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise LifecycleError(_("source: %(file)s: cannot be read (%(error)s)") % {"file": relative, "error": exc.strerror},
                             "source") from None
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise LifecycleError(_("source: %(file)s: not a regular file") % {"file": relative}, "source")
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        digest = hashlib.sha256()
        view = _buffer()
        size = 0
        with open(fd, "rb", buffering=0, closefd=False) as handle:
            while count := handle.readinto(view):
                digest.update(view[:count])
                size += count
        after = os.fstat(fd)
    except OSError as exc:
        raise LifecycleError(_("source: %(file)s: cannot be read (%(error)s)") % {"file": relative, "error": exc.strerror},
                             "source") from None
    finally:
        os.close(fd)
    if (size != after.st_size or before.st_size != after.st_size or before.st_mtime_ns != after.st_mtime_ns
            or before.st_ctime_ns != after.st_ctime_ns):
        raise LifecycleError(_("source: %(file)s: changed while it was being hashed; register it once it is "
                               "complete") % {"file": relative}, "source")
    return FileDigest(relative, size, digest.hexdigest(), after.st_mtime_ns, after.st_ino, after.st_ctime_ns)


def list_files(root: Path) -> list[tuple[str, Path]]:
    """(relative POSIX path, path) of every file hash_tree hashes under the directory `root`, sorted; no
    file is opened. Refuses what model-signing would refuse and links that leave the root."""
    root = Path(root)
    real_root = Path(os.path.realpath(root))
    found: list[tuple[str, Path]] = []
    pending = [(root, "")]
    while pending:
        directory, prefix = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError as exc:
            raise LifecycleError(_("source: %(file)s: cannot be listed (%(error)s)") % {
                "file": prefix.rstrip("/") or ".", "error": exc.strerror}, "source") from None
        for entry in entries:
            relative = prefix + entry.name
            if not prefix and entry.name in IGNORED_TOP_LEVEL:
                continue
            if entry.is_symlink():
                target = Path(os.path.realpath(entry.path))
                if not target.is_relative_to(real_root):
                    raise LifecycleError(_("source: %(file)s: a symbolic link that leaves the model's directory") % {
                        "file": relative}, "source")
                raise LifecycleError(_("source: %(file)s: a symbolic link; model-signing's verifier refuses links, so the "
                                       "model's files must be regular files (copy the file in its place)") % {
                    "file": relative}, "source")
            elif entry.is_dir(follow_symlinks=False):
                pending.append((Path(entry.path), relative + "/"))
            elif entry.is_file(follow_symlinks=False):
                found.append((relative, Path(entry.path)))
            else:
                raise LifecycleError(_("source: %(file)s: a special file (pipe, socket or device), not model data") % {
                    "file": relative}, "source")
            if len(found) > MAX_FILES:
                raise LifecycleError(_("source: more than %(count)d files; register the model's directory, not a tree "
                                       "above it") % {"count": MAX_FILES}, "source")
    found.sort()
    return found


def workers(count: int) -> int:
    return max(1, min(count, os.cpu_count() or 1, 16))


def hash_tree(root: Path) -> list[FileDigest]:
    """Every regular file of the directory `root` (sorted by path) or the single file `root` (its name as the
    path), hashed in parallel threads."""
    root = Path(root)
    if root.is_symlink() or not (root.is_dir() or root.is_file()):
        raise LifecycleError(_("source: %(file)s: neither a directory nor a regular file") % {"file": root.name or root},
                             "source")
    files = [(root.name, root)] if root.is_file() else list_files(root)
    if not files:
        raise LifecycleError(_("source: %(file)s: no files to register") % {"file": root.name}, "source")
    if len(files) == 1:
        return [hash_file(files[0][1], files[0][0])]
    with ThreadPoolExecutor(max_workers=workers(len(files)), thread_name_prefix="model-hash") as pool:
        # Largest first: the long files start at once and the small ones fill the gaps at the end.
        order = sorted(files, key=lambda item: -_size(item[1]))
        futures = {relative: pool.submit(hash_file, path, relative) for relative, path in order}
        return [futures[relative].result() for relative, _ in files]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
