"""Patterns of the site values that end up in files on the nodes: mount points, filesystem sources,
node labels, pool settings.

Each check returns the problem as text (None when the value is fine), so that the site parser can
report it against its file:line and field path, and the renderers can refuse the same value again
when it reaches them some other way (defence in depth: a value in the database was not necessarily
checked by this version of the parser).
"""

from __future__ import annotations

import re

# A mount point: absolute, normalized (no '.', '..', '//' or trailing '/'), of safe characters only.
PATH_SEGMENT = re.compile(r"^[A-Za-z0-9_@+-][A-Za-z0-9._@+-]{0,127}$")
MOUNT_POINT_MAX = 200
# systemd unit names are at most 255 characters (UNIT_NAME_MAX); a mount unit is named after its path.
UNIT_NAME_MAX = 255
_UNIT_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_.")
# Directories the operating system lives in: a filesystem mounted on one, or below one, hides or
# replaces part of the system (and the storage stage would create the directory as root).
SYSTEM_DIRECTORIES = ("/", "/mnt", "/opt", "/srv", "/media", "/tmp")
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/root", "/run",
                "/sbin", "/snap", "/sys", "/usr", "/var", "/lost+found")


def mount_point_problem(path) -> str | None:
    if not isinstance(path, str) or not path:
        return "a mount point is an absolute path"
    if not path.startswith("/"):
        return f"{path!r} is not an absolute path"
    if len(path) > MOUNT_POINT_MAX:
        return f"a mount point has at most {MOUNT_POINT_MAX} characters"
    if path != "/" and path.endswith("/"):
        return f"{path!r} ends with '/' (write {path.rstrip('/') or '/'})"
    segments = path.split("/")[1:]
    if path != "/" and "" in segments:
        return f"{path!r} has an empty component ('//')"
    if any(segment in (".", "..") for segment in segments):
        return f"{path!r} is not normalized: '.' and '..' are not allowed in a mount point"
    bad = next((s for s in segments if path != "/" and not PATH_SEGMENT.fullmatch(s)), None)
    if bad is not None:
        return (f"{path!r}: component {bad!r} has characters other than letters, digits and . _ @ + - "
                "(or starts with '.')")
    if path in SYSTEM_DIRECTORIES or any(path == tree or path.startswith(tree + "/") for tree in SYSTEM_TREES):
        return f"{path!r} is a system directory; mount filesystems elsewhere (e.g. /mnt/NAME, /lustre/NAME)"
    if len(mount_unit_name(path)) > UNIT_NAME_MAX:
        return f"{path!r} is too long for a systemd mount unit name ({UNIT_NAME_MAX} characters once escaped)"
    return None


def mount_unit_name(path: str, suffix: str = "mount") -> str:
    """systemd-escape --path --suffix: /mnt/lustre-a -> mnt-lustre\\x2da.mount (systemd requires this name)."""
    trimmed = "/".join(part for part in path.split("/") if part)
    if not trimmed:
        return f"-.{suffix}"
    escaped = []
    for position, char in enumerate(trimmed):
        if char == "/":
            escaped.append("-")
        elif char in _UNIT_SAFE and not (char == "." and position == 0):
            escaped.append(char)
        else:
            escaped.append("".join(f"\\x{byte:02x}" for byte in char.encode()))
    return "".join(escaped) + f".{suffix}"


HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*)"
IPV4 = r"(?:\d{1,3}(?:\.\d{1,3}){3})"
SUBDIRECTORIES = r"(?:/[A-Za-z0-9_@+-][A-Za-z0-9._@+-]*)*"
EXPORT_PATH = rf"(?:/|{SUBDIRECTORIES[:-1]}+)"
# Lustre: MGS NIDs (address@network, ',' between one server's NIDs, ':' between failover servers),
# then ':/' and the filesystem name (at most 8 characters), optionally a subdirectory.
LUSTRE_NID = rf"(?:{HOST}@[a-z][a-z0-9]*)"
SOURCE_PATTERNS = {
    "lustre": (re.compile(rf"^{LUSTRE_NID}(?:[,:]{LUSTRE_NID})*:/[A-Za-z0-9_-]{{1,8}}{SUBDIRECTORIES}$"),
               "MGS NIDs, ':/' and the filesystem name, e.g. 10.10.1.1@o2ib:/scratch"),
    "nfs-rdma": (re.compile(rf"^(?:{HOST}|{IPV4}|\[[0-9A-Fa-f:.]+\]):{EXPORT_PATH}$"),
                 "server:/export/path, e.g. stor02:/export/datasets"),
    "beegfs": (re.compile(rf"^(?:{HOST}|{IPV4})$"), "the management host, e.g. stor01 or 10.10.1.1"),
}


def source_problem(fs_type: str, source) -> str | None:
    pattern, example = SOURCE_PATTERNS.get(fs_type, (None, ""))
    if pattern is None:
        return None  # the type itself is reported
    if not isinstance(source, str) or not pattern.match(source):
        return f"{source!r} is not a {fs_type} source ({example})"
    return None


# Node labels: Kubernetes' syntax (an optional DNS prefix and '/', a name of 63 characters at most);
# values are numbers, true/false, or text in the same alphabet.
LABEL_KEY = re.compile(r"^(?:[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$")


def label_problem(key: str, value) -> str | None:
    if not LABEL_KEY.fullmatch(key):
        return (f"label name {key!r} is not [prefix/]name (letters, digits, '-', '_', '.', at most 63 "
                "characters, starting and ending with a letter or digit)")
    if isinstance(value, bool | int):
        return None
    if not isinstance(value, str) or not LABEL_VALUE.fullmatch(value):
        return (f"label value {value!r} is not a number, true/false or text of letters, digits, '-', '_', '.' "
                "(at most 63 characters)")
    return None


# Pool settings the suite acts on. Slurm's partition and time limit go to slurm.conf; the MIG strategy
# and mig-parted configuration name to the GPU operator's values and node labels.
SLURM_TIME = re.compile(r"^(?:INFINITE|UNLIMITED|\d{1,6}(?::\d{1,2}){0,2}|\d{1,4}-\d{1,2}(?::\d{1,2}){0,2})$")
MIG_STRATEGIES = ("none", "single", "mixed")
MIG_CONFIG = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
POOL_SETTINGS = ("partition", "max_time", "time_slicing", "mig_strategy", "mig_config")
