"""mount, umount, findmnt: mounts are entries in the state; the mount point must exist in the sysroot."""

from __future__ import annotations

import json

from .. import packages
from ..state import has_fault, node_path
from . import kmod

# filesystem type -> (package that ships the mount helper, kernel modules it needs)
FILESYSTEMS = {
    "lustre": ("lustre-client-utils", ("lustre",)),
    "beegfs": ("beegfs-client", ("beegfs",)),
    "nfs": ("nfs-common", ("nfs",)),
    "nfs4": ("nfs-common", ("nfs", "nfsv4")),
    "tmpfs": (None, ()),
    "ext4": (None, ()),
    "xfs": (None, ()),
}


class MountError(Exception):
    pass


def _installed(state: dict, package_name: str) -> bool:
    wanted = packages.find(package_name)
    return any(packages.find(name) == wanted for name in state["packages"])


def mount(state: dict, sysroot, source: str, target: str, fstype: str, options: list[str]) -> None:
    target = "/" + target.strip("/")
    if fstype not in FILESYSTEMS:
        raise MountError(f"unknown filesystem type '{fstype}'.")
    package, modules = FILESYSTEMS[fstype]
    if package and not _installed(state, package):
        raise MountError(f"wrong fs type, bad option, bad superblock on {source}, missing codepage or helper "
                         f"program, or other error (mount.{fstype} is missing: install {package})")
    # The kernel loads a filesystem's module on first mount (the fs-<type> alias); the RDMA
    # transport of NFS it does not: rpcrdma must be loaded beforehand.
    for module in modules:
        try:
            kmod.load(state, module)
        except kmod.ModuleError as exc:
            raise MountError(f"mounting {source} on {target} failed: unknown filesystem type '{fstype}' ({exc})") from None
    needed = ["rpcrdma"] if fstype.startswith("nfs") and "proto=rdma" in options else []
    missing = [module for module in needed if module not in state["modules"]]
    if missing:
        raise MountError(f"mounting {source} on {target} failed: No such device (kernel module {', '.join(missing)} "
                         f"not loaded)")
    if not node_path(sysroot, target).is_dir():
        raise MountError(f"mount point {target} does not exist.")
    if any(existing["target"] == target for existing in state["mounts"]):
        raise MountError(f"{target}: already mounted or mount point busy.")
    if has_fault(state, "mount_fails", mount_point=target):
        raise MountError(f"mount.{fstype}: mounting {source} on {target} failed: Connection timed out")
    state["mounts"].append({"source": source, "target": target, "fstype": fstype, "options": options})


def unmount(state: dict, target: str) -> None:
    target = "/" + target.strip("/")
    remaining = [existing for existing in state["mounts"] if existing["target"] != target and existing["source"] != target]
    if len(remaining) == len(state["mounts"]):
        raise MountError(f"{target}: not mounted.")
    state["mounts"] = remaining


def _fstab(tool) -> list[dict]:
    fstab = tool.path("/etc/fstab")
    entries = []
    if fstab.exists():
        for line in fstab.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 4 and not fields[0].startswith("#"):
                entries.append({"source": fields[0], "target": fields[1], "fstype": fields[2],
                                "options": fields[3].split(",")})
    return entries


def _findmnt(tool, argv: list[str]) -> int:
    fields, target, as_json, noheadings = ["TARGET", "SOURCE", "FSTYPE", "OPTIONS"], None, False, False
    iterator = iter(argv)
    for arg in iterator:
        if arg in ("-o", "--output"):
            fields = next(iterator, "").upper().split(",")
        elif arg.startswith("--output="):
            fields = arg.split("=", 1)[1].upper().split(",")
        elif arg in ("-J", "--json"):
            as_json = True
        elif arg in ("-n", "--noheadings"):
            noheadings = True
        elif arg in ("-T", "--target", "-M", "--mountpoint"):
            target = next(iterator, "")
        elif arg.startswith("-"):
            raise tool.unsupported(argv)
        else:
            target = arg
    if any(field not in ("TARGET", "SOURCE", "FSTYPE", "OPTIONS") for field in fields):
        raise tool.unsupported(argv)
    mounts = tool.state()["mounts"]
    if target is not None:
        mounts = [mount_ for mount_ in mounts if mount_["target"] == "/" + target.strip("/") or mount_["source"] == target]
        if not mounts:
            return 1
    rows = [{"target": m["target"], "source": m["source"], "fstype": m["fstype"], "options": ",".join(m["options"])}
            for m in mounts]
    if as_json:
        tool.print(json.dumps({"filesystems": [{field.lower(): row[field.lower()] for field in fields} for row in rows]},
                              indent=3))
        return 0
    if not noheadings:
        tool.print(" ".join(fields))
    for row in rows:
        tool.print(" ".join(row[field.lower()] for field in fields))
    return 0


def main(tool, argv: list[str]) -> int:
    if tool.name == "findmnt":
        return _findmnt(tool, argv)
    try:
        if tool.name == "umount":
            targets = [arg for arg in argv if not arg.startswith("-")]
            if not targets:
                raise tool.fail("bad usage", 1)
            with tool.update() as state:
                for target in targets:
                    unmount(state, target)
            return 0
        fstype, options, positional = None, [], []
        iterator = iter(argv)
        for arg in iterator:
            if arg == "-t":
                fstype = next(iterator, "")
            elif arg == "-o":
                options = [option for option in next(iterator, "").split(",") if option]
            elif arg.startswith("-"):
                raise tool.unsupported(argv)
            else:
                positional.append(arg)
        if not positional:
            for mounted in tool.state()["mounts"]:
                tool.print(f"{mounted['source']} on {mounted['target']} type {mounted['fstype']} "
                           f"({','.join(mounted['options'])})")
            return 0
        if len(positional) == 1:
            entry = next((entry for entry in _fstab(tool) if positional[0] in (entry["target"], entry["source"])), None)
            if entry is None:
                raise tool.fail(f"{positional[0]}: can't find in /etc/fstab.", 1)
            source, target, fstype, options = entry["source"], entry["target"], entry["fstype"], entry["options"]
        else:
            source, target = positional[:2]
        if fstype is None:
            raise tool.fail("the simulated mount needs -t TYPE", 2)
        options = [option for option in options if option not in ("defaults", "_netdev")] or ["rw"]
        with tool.update() as state:
            mount(state, tool.sysroot, source, target, fstype, options)
    except MountError as exc:
        raise tool.fail(str(exc), 32) from None
    return 0
