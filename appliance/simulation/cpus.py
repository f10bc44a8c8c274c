"""The host CPUs of a simulated server: its sockets, cores and hardware threads, from the platform's `host`.

Linux on a two-socket x86 server numbers the first hardware thread of every core first (socket 0's cores,
then socket 1's), then the second threads in the same order: on 2 x 56 cores with 2 threads, socket 0 holds
CPUs 0-55 and 112-167. The simulated node shows this numbering where a real one does: /proc/cpuinfo
(processor, physical id, core id) and the CPU Affinity column of `nvidia-smi topo -m` (a GPU is attached to
the socket of its NUMA node). Slurm's gres.conf `Cores=` is computed from both on the node, as on real
hardware (appliance.hgx.topo_affinity).

Stdlib only: the simulated tools import it with the node's system Python.
"""

from __future__ import annotations


def topology(platform: dict) -> dict:
    """The platform's host CPU topology ({} when it declares none: management and storage servers)."""
    host = platform.get("host") or {}
    if not host.get("sockets") or not host.get("cores_per_socket"):
        return {}
    return {"sockets": int(host["sockets"]), "cores_per_socket": int(host["cores_per_socket"]),
            "threads_per_core": int(host.get("threads_per_core", 1))}


def _processors(cpu: dict):
    """(processor, socket, core id) in Linux's numbering."""
    sockets, cores, threads = cpu["sockets"], cpu["cores_per_socket"], cpu["threads_per_core"]
    for thread in range(threads):
        for socket in range(sockets):
            for core in range(cores):
                yield thread * sockets * cores + socket * cores + core, socket, core


def id_list(ids) -> str:
    """Sorted ids -> "0-55,112-167"."""
    ranges: list[list[int]] = []
    for value in sorted(set(ids)):
        if ranges and value == ranges[-1][1] + 1:
            ranges[-1][1] = value
        else:
            ranges.append([value, value])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def socket_cpus(cpu: dict, socket: int) -> str:
    """The CPUs of one socket, as nvidia-smi prints a GPU's CPU Affinity ("0-55,112-167")."""
    return id_list(processor for processor, on, _ in _processors(cpu) if on == socket)


def cpuinfo(cpu: dict) -> str:
    """/proc/cpuinfo with the fields that place each processor (the kernel writes many more)."""
    siblings = cpu["cores_per_socket"] * cpu["threads_per_core"]
    blocks = []
    for processor, socket, core in sorted(_processors(cpu)):
        blocks.append(f"processor\t: {processor}\nvendor_id\t: GenuineIntel\n"
                      f"model name\t: Intel(R) Xeon(R) Platinum 8480+\nphysical id\t: {socket}\n"
                      f"siblings\t: {siblings}\ncore id\t\t: {core}\ncpu cores\t: {cpu['cores_per_socket']}\n")
    return "\n".join(blocks) + "\n"
