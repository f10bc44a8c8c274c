"""The programs of the host (the controller) that the appliance runs, and the Debian package of each.

Three uses, each a superset of the one before: `runtime` (a production controller), `simulation` (the
simulated appliance of the demo: its Slurm daemons, its nodes' SSH servers, its NVML library compiled
on first use) and `test` (the test command). The packages each use installs are listed in one file per
use, `.requirements/debian-<use>.txt`, which the README's set-up command (`xargs -a ... apt-get install
-y`), `tests/run` and the production installer read; `tests/core/test_host.py` fails when a program
below needs a package its use's list does not bring, or when product code names a host program that is
not declared here.

The bootstrap and the production installer call `require(use)` before they change anything, so that a
missing package is one message naming it and the command that installs it, not a failure ten stages
later.
"""

import os
import shutil
from dataclasses import dataclass

USES = ("runtime", "simulation", "test")


@dataclass(frozen=True)
class Program:
    path: str  # where it is run from (absolute), or its name looked up on the PATH
    package: str  # the Debian package that installs it
    use: str  # the first use that needs it (the later ones include it)
    why: str

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def present(self) -> bool:
        if os.path.isabs(self.path):
            return os.access(self.path, os.X_OK)
        return shutil.which(self.path) is not None


PROGRAMS = (
    # A production controller reaches its nodes over SSH (Ansible's ssh connection).
    Program("/usr/bin/ssh", "openssh-client", "runtime", "Ansible reaches the nodes over SSH"),
    Program("/usr/bin/python3", "python3", "simulation", "a simulated node's system Python"),
    Program("/usr/sbin/slurmctld", "slurmctld", "simulation", "the training pool's Slurm controller"),
    Program("/usr/sbin/slurmd", "slurmd", "simulation", "one Slurm node daemon per simulated GPU server"),
    Program("sbatch", "slurm-client", "simulation", "the demo's training jobs are submitted to Slurm"),
    Program("squeue", "slurm-client", "simulation", "the job map of the collectors and lending"),
    Program("sinfo", "slurm-client", "simulation", "the Slurm nodes' states"),
    Program("scontrol", "slurm-client", "simulation", "drain and resume of Slurm nodes"),
    Program("scancel", "slurm-client", "simulation", "stopping the demo's jobs"),
    Program("/usr/bin/unshare", "util-linux", "simulation", "each Slurm daemon runs in its own namespaces"),
    Program("/usr/sbin/sshd", "openssh-server", "simulation", "one SSH server per simulated node"),
    Program("/usr/bin/ssh-keygen", "openssh-client", "simulation", "the simulated nodes' host and login keys"),
    Program("/usr/bin/sudo", "sudo", "simulation", "Ansible's `become` on a simulated node"),
    Program("/usr/sbin/visudo", "sudo", "simulation", "the simulation's sudoers drop-in is checked"),
    Program("/usr/sbin/useradd", "passwd", "simulation", "the simulation's service account"),
    Program("/usr/sbin/userdel", "passwd", "simulation", "removing the simulation's service account"),
    Program("gcc", "gcc", "simulation", "the simulated NVML library is compiled on first use"),
    Program("/usr/bin/chromium", "chromium", "test", "the portal's pages are tested in a real browser"),
    Program("pg_isready", "postgresql-client", "test", "the test command waits for PostgreSQL"),
    Program("redis-cli", "redis-tools", "test", "the test command waits for Redis"),
    Program("msgfmt", "gettext", "test", "the translations are compiled and checked"),
    Program("victoria-metrics", "victoria-metrics", "test", "a real InfluxDB-protocol server for the sink"),
)


class HostNotReady(Exception):
    """Programs this use needs are missing; the message names their packages and the install command."""


def programs(use: str) -> list[Program]:
    if use not in USES:
        raise ValueError(f"unknown use {use!r} (uses: {', '.join(USES)})")
    wanted = USES[:USES.index(use) + 1]
    return [program for program in PROGRAMS if program.use in wanted]


def program(name: str) -> Program:
    """The declared program of that name (the basename of its path)."""
    for candidate in PROGRAMS:
        if candidate.name == name:
            return candidate
    raise KeyError(f"{name}: not a declared host program (appliance/core/host.py)")


def missing(use: str) -> list[Program]:
    return [program for program in programs(use) if not program.present()]


def install_command(packages: list[str]) -> str:
    prefix = "" if os.geteuid() == 0 else "sudo "
    return f"{prefix}apt-get install -y {' '.join(packages)}"


def require(use: str, *, root: bool = False) -> None:
    """Raise HostNotReady naming every missing package of `use` and the command that installs them
    (and, with `root`, that the use needs root). Nothing is changed."""
    problems = []
    absent = missing(use)
    if absent:
        packages = list(dict.fromkeys(program.package for program in absent))
        names = ", ".join(f"{program.name} ({program.package})" for program in absent)
        problems.append(f"the host lacks what the {use} needs: {names}; install with: "
                        f"{install_command(packages)} (every package of this use: "
                        f".requirements/debian-{use}.txt in a checkout)")
    if root and os.geteuid() != 0:
        problems.append(f"the {use} needs root: the simulated Slurm's daemons run in mount namespaces of their "
                        "own with the GPU device files (mknod) their gres.conf names; run it as root")
    if problems:
        raise HostNotReady("; ".join(problems))
