"""What the simulated package manager knows: the packages a simulated node can install, what each one
brings (kernel modules that become loadable, commands, systemd units) and the kernel modules' rules.

Names follow Ubuntu 22.04 with NVIDIA's CUDA and DOCA repositories, the OS the appliance ships.
A name that is not here cannot be installed: the simulated apt-get answers "Unable to locate package",
as apt does, instead of pretending.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

KERNEL_RELEASE = "5.15.0-113-generic"


@dataclass(frozen=True)
class Package:
    pattern: str                       # a full-match regular expression on the package name
    version: str                       # a fixed version, or "{driver}", "{dcgm}", "{cuda}" from the platform
    modules: tuple[str, ...] = ()      # kernel modules the package makes loadable
    commands: tuple[str, ...] = ()     # simulated commands that exist once the package is installed
    units: tuple[str, ...] = ()        # systemd units it ships
    enabled_units: tuple[str, ...] = ()  # units its maintainer scripts enable and start (Debian policy)
    conflicts: tuple[str, ...] = ()    # packages it replaces
    depends: tuple[str, ...] = field(default=())

    def matches(self, name: str) -> bool:
        return re.fullmatch(self.pattern, name) is not None


NVIDIA_DRIVER_MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem")

CATALOGUE: tuple[Package, ...] = (
    # The NVIDIA driver under any of its repository names (server branch, open kernel modules, meta package).
    Package(r"nvidia-driver(-\d+)?(-server)?(-open)?|cuda-drivers(-\d+)?|nvidia-open(-\d+)?", "{driver}",
            modules=NVIDIA_DRIVER_MODULES, commands=("nvidia-smi",), units=("nvidia-persistenced.service",)),
    Package(r"nvidia-utils(-\d+)?(-server)?|nvidia-compute-utils(-\d+)?(-server)?", "{driver}",
            commands=("nvidia-smi",)),
    Package(r"nvidia-fabricmanager(-\d+)?|cuda-drivers-fabricmanager(-\d+)?", "{driver}",
            units=("nvidia-fabricmanager.service",)),
    Package(r"libnvidia-nscq(-\d+)?", "{driver}"),
    Package(r"datacenter-gpu-manager(-4)?(-cuda\d+)?", "{dcgm}", commands=("dcgmi",), units=("nvidia-dcgm.service",)),
    Package(r"nvidia-fs(-dkms)?", "2.20.5-1", modules=("nvidia_fs",)),
    Package(r"nvidia-gds(-\d+(-\d+)?)?", "{cuda}.0-1", modules=("nvidia_fs",), commands=("gdscheck",),
            depends=("nvidia-fs",)),
    Package(r"cuda-toolkit(-\d+(-\d+)?)?", "{cuda}.0-1"),
    Package(r"libnccl2|libnccl-dev", "2.21.5-1+cuda{cuda}"),
    # Built from NVIDIA/nccl-tests into the appliance's own repository.
    Package(r"nccl-tests", "2.13.10-1", commands=("all_reduce_perf", "all_gather_perf"), depends=("libnccl2",)),
    Package(r"rdma-core", "2404mlnx51-1.2404066", modules=("ib_ipoib", "ib_umad", "rdma_ucm", "rdma_cm", "ib_uverbs"),
            units=("rdma.service",)),
    Package(r"ibverbs-utils|ibverbs-providers|libibverbs1|librdmacm1", "2404mlnx51-1.2404066",
            commands=("ibv_devinfo",)),
    Package(r"infiniband-diags", "2404mlnx51-1.2404066", commands=("ibstat", "ibstatus")),
    Package(r"perftest", "24.04.0-0.41.gd6f8a3b.2404066", commands=("ib_write_bw", "ib_read_bw")),
    Package(r"opensm", "5.19.0.MLNX20240512.5a2ba17e-0.1.2404066", units=("opensm.service",)),
    Package(r"doca-ofed|mlnx-ofed-kernel-dkms|doca-ofed-userspace", "2.7.0-1"),
    Package(r"chrony", "4.2-2ubuntu2", commands=("chronyc",), units=("chrony.service",),
            enabled_units=("chrony.service",), conflicts=("systemd-timesyncd",)),
    Package(r"linux-tools-common|linux-tools-generic|linux-tools-" + re.escape(KERNEL_RELEASE), "5.15.0-113.123",
            commands=("cpupower",)),
    Package(r"numactl|hwloc|pciutils|kmod|tuned", "1.0-1"),
    Package(r"lustre-client-modules(-.+)?|lustre-client-modules-dkms", "2.15.5-1",
            modules=("lnet", "ko2iblnd", "lustre")),
    Package(r"lustre-client-utils", "2.15.5-1", commands=("lctl",)),
    Package(r"beegfs-client(-dkms)?", "7.4.4", modules=("beegfs",), units=("beegfs-client.service",)),
    Package(r"beegfs-helperd|beegfs-utils|libbeegfs-ib", "7.4.4", units=("beegfs-helperd.service",)),
    Package(r"nfs-common", "1:2.6.1-1ubuntu1.2", units=("nfs-client.target",)),
    Package(r"fio", "3.28-1", commands=("fio",)),
    Package(r"lbnl-nhc", "1.4.3-1"),
    Package(r"munge", "0.5.14-6", units=("munge.service",), enabled_units=("munge.service",)),
    Package(r"slurmd|slurm-client|slurm-wlm-basic-plugins|slurm-wlm", "21.08.5-2ubuntu1", units=("slurmd.service",)),
    Package(r"slurmctld", "21.08.5-2ubuntu1", units=("slurmctld.service",)),
    Package(r"containerd|containerd\.io", "1.7.12-0ubuntu2~22.04.1", units=("containerd.service",),
            enabled_units=("containerd.service",)),
    Package(r"kubelet|kubeadm|kubectl", "1.30.2-1.1", units=("kubelet.service",)),
    Package(r"nvidia-container-toolkit(-base)?", "1.16.1-1", commands=("nvidia-ctk",)),
    # The node_python role installs the NVML binding into its venv with the system's pip (Ubuntu 22.04's).
    Package(r"python3-pip", "22.0.2+dfsg-1ubuntu0.4", depends=("python3-setuptools",)),
    Package(r"python3-setuptools", "59.6.0-1.2ubuntu0.22.04.1"),
    Package(r"prometheus-node-exporter", "1.3.1-1ubuntu0.22.04.2", units=("prometheus-node-exporter.service",),
            enabled_units=("prometheus-node-exporter.service",)),
)

# What a factory Ubuntu server image has.
FACTORY_PACKAGES = {
    "linux-image-" + KERNEL_RELEASE: "5.15.0-113.123",
    "systemd": "249.11-0ubuntu3.12",
    "systemd-timesyncd": "249.11-0ubuntu3.12",
    "kmod": "29-1ubuntu1",
    "pciutils": "1:3.7.0-6",
    "procps": "2:3.3.17-6ubuntu2.1",
    "openssh-server": "1:8.9p1-3ubuntu0.10",
    "grub-efi-amd64": "2.06-2ubuntu14.4",
    "util-linux": "2.37.2-4ubuntu3.4",
}
FACTORY_UNITS = {
    "ssh.service": {"enabled": True, "active": True},
    "systemd-timesyncd.service": {"enabled": True, "active": True},
}
# The package each factory unit comes with: removing the package removes the unit.
# systemd-networkd ships with systemd itself; the image configures its network elsewhere (netplan), so
# the unit is present but not enabled until a stage writes .network files for it.
FACTORY_UNIT_PACKAGES = {"ssh.service": "openssh-server", "systemd-timesyncd.service": "systemd-timesyncd",
                         "systemd-networkd.service": "systemd"}
FACTORY_COMMANDS = ("modprobe", "lsmod", "rmmod", "systemctl", "apt-get", "dpkg-query", "update-grub",
                    "grub-mkconfig", "sysctl", "setpci", "lspci", "mount", "umount", "findmnt", "reboot")

# Modules the Ubuntu kernel ships (inbox drivers), loadable without any package.
INBOX_MODULES = ("nouveau", "drm", "mlx5_core", "mlx5_ib", "ib_core", "ib_uverbs", "ib_ipoib", "ib_umad",
                 "rdma_cm", "rdma_ucm", "nfs", "nfsv4", "sunrpc", "rpcrdma", "xprtrdma", "br_netfilter", "overlay")

# modprobe loads these first.
MODULE_DEPENDENCIES = {
    "nvidia_uvm": ("nvidia",),
    "nvidia_modeset": ("nvidia",),
    "nvidia_drm": ("nvidia_modeset",),
    "nvidia_peermem": ("nvidia", "ib_core"),
    "nvidia_fs": ("nvidia",),
    "mlx5_ib": ("mlx5_core", "ib_core"),
    "ib_ipoib": ("ib_core",),
    "ib_uverbs": ("ib_core",),
    "ib_umad": ("ib_core",),
    "rdma_ucm": ("rdma_cm",),
    "rdma_cm": ("ib_core",),
    "ko2iblnd": ("lnet", "rdma_cm"),
    "lustre": ("lnet",),
    "rpcrdma": ("sunrpc", "rdma_cm"),
    "nfsv4": ("nfs",),
    "nfs": ("sunrpc",),
}

# Units that only start when the driver is loaded (they talk to /dev/nvidia*).
UNIT_NEEDS_MODULE = {
    "nvidia-persistenced.service": "nvidia",
    "nvidia-fabricmanager.service": "nvidia",
    "nvidia-dcgm.service": "nvidia",
    "beegfs-client.service": "beegfs",
}


def find(name: str) -> Package | None:
    for package in CATALOGUE:
        if package.matches(name):
            return package
    return None


def candidate_version(package: Package, software: dict) -> str:
    return package.version.format(driver=software.get("driver_version", "0"),
                                  dcgm="1:" + software.get("dcgm_version", "0"),
                                  cuda=software.get("cuda_version", "0"))


def installed_commands(state: dict) -> set[str]:
    commands = set(FACTORY_COMMANDS)
    for name in state.get("packages", {}):
        package = find(name)
        if package:
            commands.update(package.commands)
    return commands


def loadable_modules(state: dict) -> set[str]:
    modules = set(INBOX_MODULES)
    for name in state.get("packages", {}):
        package = find(name)
        if package:
            modules.update(package.modules)
    return modules


def known_units(state: dict) -> set[str]:
    units = {unit for unit, package in FACTORY_UNIT_PACKAGES.items() if package in state.get("packages", {})}
    for name in state.get("packages", {}):
        package = find(name)
        if package:
            units.update(package.units)
    return units
