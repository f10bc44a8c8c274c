"""What a site may set on a filesystem client: tunables and mount options, by filesystem type.

Both end in root-owned files on every client (modprobe.d, systemd units, the BeeGFS client config),
so each name comes from a catalogue and each value has a type and a range; anything else is refused
with the list of what is known. The catalogues are data: add an entry here (with its range) to allow
a new knob, and the storage renderer writes it where its kind belongs.

Sources: the Lustre Operations Manual 2.15 ("Configuration Files and Module Parameters" for the lnet
and ko2iblnd module parameters, "Tuning a Lustre File System" and "Lustre Parameters" for the client's
lctl parameters) and the limits in the Lustre client code (osc/mdc max_rpcs_in_flight up to
OBD_MAX_RIF_MAX 512, max_dirty_mb below OSC_MAX_DIRTY_MB_MAX 2048, ko2iblnd credits stored in a u8,
at most 256 RDMA fragments); Whamcloud's published ko2iblnd tuning (peer_credits=128 credits=1024
concurrent_sends=256 ntx=2048 map_on_demand=32 ...); BeeGFS 7.4's beegfs-client.conf; nfs(5).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Value:
    """The type of a tunable's or a mount option's value."""

    kind: str  # "integer", "boolean" (true/false), "choice", "flag" (a mount option without a value)
    minimum: int = 0
    maximum: int = 0
    choices: tuple[str, ...] = ()

    def problem(self, value) -> str | None:
        """Why `value` is not of this type, or None."""
        if self.kind == "integer":
            number = _integer(value)
            if number is None:
                return f"{value!r} is not a whole number"
            if not self.minimum <= number <= self.maximum:
                return f"{number} is out of range ({self.minimum}-{self.maximum})"
            return None
        if self.kind == "boolean":
            return None if isinstance(value, bool) else f"{value!r} is not true or false"
        if self.kind == "choice":
            return None if str(value) in self.choices and not isinstance(value, bool) else (
                f"{value!r} is not one of: {', '.join(self.choices)}")
        raise ValueError(f"unknown value kind {self.kind!r}")


def _integer(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,12}", value):
        return int(value)
    return None


def integer(minimum: int, maximum: int) -> Value:
    return Value("integer", minimum, maximum)


def choice(*choices: str) -> Value:
    return Value("choice", choices=choices)


SWITCH = integer(0, 1)  # a kernel module's 0/1 parameter
BOOLEAN = Value("boolean")
FLAG = Value("flag")
PORT = integer(1, 65535)

# Kernel module parameters (modprobe.d) are `lnet.<param>` and `ko2iblnd.<param>`; the LNet network
# itself (lnet.networks) is rendered from the storage network and is not a tunable.
LUSTRE_MODULE_TUNABLES = {
    "lnet.lnet_transaction_timeout": integer(1, 3600),
    "lnet.lnet_retry_count": integer(0, 5),
    "lnet.lnet_health_sensitivity": integer(0, 1000),
    "lnet.lnet_recovery_interval": integer(1, 3600),
    "lnet.lnet_peer_discovery_disabled": SWITCH,
    "ko2iblnd.peer_credits": integer(1, 255),
    "ko2iblnd.peer_credits_hiw": integer(0, 255),
    "ko2iblnd.credits": integer(1, 65536),
    "ko2iblnd.concurrent_sends": integer(0, 1024),
    "ko2iblnd.ntx": integer(1, 65536),
    "ko2iblnd.map_on_demand": integer(0, 256),
    "ko2iblnd.fmr_pool_size": integer(1, 65536),
    "ko2iblnd.fmr_flush_trigger": integer(1, 65536),
    "ko2iblnd.fmr_cache": SWITCH,
    "ko2iblnd.conns_per_peer": integer(0, 127),
    "ko2iblnd.timeout": integer(1, 3600),
}
# Client parameters applied with `lctl set_param` once the filesystem is mounted.
LUSTRE_LCTL_TUNABLES = {
    "osc.*.max_rpcs_in_flight": integer(1, 512),
    "osc.*.max_dirty_mb": integer(1, 2047),
    "osc.*.max_pages_per_rpc": integer(1, 4096),
    "osc.*.checksums": SWITCH,
    "osc.*.short_io_bytes": integer(0, 65536),
    "mdc.*.max_rpcs_in_flight": integer(1, 512),
    "mdc.*.max_mod_rpcs_in_flight": integer(1, 511),
    "llite.*.max_read_ahead_mb": integer(0, 65536),
    "llite.*.max_read_ahead_per_file_mb": integer(0, 65536),
    "llite.*.max_read_ahead_whole_mb": integer(0, 65536),
    "llite.*.max_cached_mb": integer(0, 16 * 1024 * 1024),
    "llite.*.statahead_max": integer(0, 8192),
    "llite.*.checksum_pages": SWITCH,
    "ldlm.namespaces.*.lru_size": integer(0, 1_000_000),
    "ldlm.namespaces.*.lru_max_age": integer(1, 86_400_000),
}
# beegfs-client.conf keys (`key = value`); sysMgmtdHost and connUseRDMA are rendered from the site.
BEEGFS_TUNABLES = {
    "connRDMABufNum": integer(1, 1024),
    "connRDMABufSize": integer(1024, 1024 * 1024),
    "connRDMATypeOfService": integer(0, 255),
    "connClientPortUDP": PORT,
    "connHelperdPortTCP": PORT,
    "connMgmtdPortTCP": PORT,
    "connMgmtdPortUDP": PORT,
    "connMaxInternodeNum": integer(1, 1024),
    "connCommRetrySecs": integer(0, 86400),
    "connFallbackExpirationSecs": integer(0, 86400),
    "tuneFileCacheType": choice("buffered", "native", "none"),
    "tuneRemoteFSync": BOOLEAN,
    "tuneUseGlobalFileLocks": BOOLEAN,
    "tuneUseGlobalAppendLocks": BOOLEAN,
    "tuneCoherentBuffers": BOOLEAN,
    "sysSessionCheckOnClose": BOOLEAN,
}
TUNABLES: dict[str, dict[str, Value]] = {
    "lustre": {**LUSTRE_MODULE_TUNABLES, **LUSTRE_LCTL_TUNABLES},
    "beegfs": BEEGFS_TUNABLES,
    # NFS over RDMA is tuned through its mount options.
    "nfs-rdma": {},
}

# Mount options every filesystem type takes (mount(8)).
COMMON_MOUNT_OPTIONS = {name: FLAG for name in (
    "ro", "rw", "noatime", "relatime", "nodiratime", "nosuid", "nodev", "noexec", "_netdev")}
MOUNT_OPTIONS: dict[str, dict[str, Value]] = {
    "lustre": {**COMMON_MOUNT_OPTIONS, **{name: FLAG for name in (
        "flock", "localflock", "noflock", "user_xattr", "nouser_xattr", "lazystatfs", "nolazystatfs",
        "checksum", "nochecksum", "acl", "noacl")}},
    "nfs-rdma": {
        **COMMON_MOUNT_OPTIONS,
        "proto": choice("rdma"),
        "port": PORT,
        "nconnect": integer(1, 16),
        "max_connect": integer(1, 16),
        "vers": choice("3", "4", "4.0", "4.1", "4.2"),
        "rsize": integer(4096, 1024 * 1024),
        "wsize": integer(4096, 1024 * 1024),
        "timeo": integer(1, 6000),
        "retrans": integer(0, 255),
        "actimeo": integer(0, 3600),
        "acregmin": integer(0, 3600),
        "acregmax": integer(0, 3600),
        "acdirmin": integer(0, 3600),
        "acdirmax": integer(0, 3600),
        "lookupcache": choice("all", "none", "pos", "positive"),
        "local_lock": choice("none", "all", "flock", "posix"),
        "sec": choice("sys", "krb5", "krb5i", "krb5p"),
        **{name: FLAG for name in ("hard", "soft", "softreval", "noac", "nocto", "fsc", "nofsc", "noresvport")},
    },
    # The client config file (cfgFile=) is rendered from the site, one per filesystem.
    "beegfs": dict(COMMON_MOUNT_OPTIONS),
}

_OPTION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$")


def tunable_problem(fs_type: str, name: str, value) -> str | None:
    """Why `name: value` is not a tunable of a `fs_type` filesystem, or None."""
    known = TUNABLES.get(fs_type, {})
    if name not in known:
        valid = ", ".join(sorted(known)) or "none: tune it through its mount options"
        return f"unknown {fs_type} tunable {name!r} (valid: {valid})"
    problem = known[name].problem(value)
    return f"{name}: {problem}" if problem else None


def mount_option_problem(fs_type: str, option: str) -> str | None:
    """Why `option` (`name` or `name=value`) is not a mount option of a `fs_type` filesystem, or None."""
    known = MOUNT_OPTIONS.get(fs_type, {})
    match = _OPTION.fullmatch(option)
    if match is None or match.group(1) not in known:
        return f"unknown {fs_type} mount option {option!r} (valid: {', '.join(sorted(known))})"
    name, value = match.group(1), match.group(2)
    spec = known[name]
    if spec.kind == "flag":
        return None if value is None else f"mount option {name} takes no value"
    if value is None:
        return f"mount option {name} needs a value ({name}=...)"
    problem = spec.problem(value)
    return f"mount option {name}: {problem}" if problem else None
