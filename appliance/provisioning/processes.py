"""Stopping an ansible-playbook together with everything it started.

Killing ansible-playbook alone is not enough: Mitogen's connection multiplexers are forked from it
into sessions of their own, outlive it and would keep acting on the nodes (and pile up). So the
whole tree is collected while the parent still links it, then every member is killed.
"""

import os
import signal
from pathlib import Path


def _parents() -> dict[int, int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name in parentheses may hold spaces; the parent pid is the second field after it.
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants, parents before children."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    tree, queue = [], [pid]
    while queue:
        current = queue.pop(0)
        tree.append(current)
        queue.extend(children.get(current, ()))
    return tree


def is_ansible(pid: int) -> bool:
    try:
        return b"ansible" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def kill_tree(pid: int) -> list[int]:
    """SIGKILL `pid` and its descendants; returns the pids signalled."""
    signalled = []
    for member in process_tree(pid):
        try:
            os.kill(member, signal.SIGKILL)
            signalled.append(member)
        except (ProcessLookupError, PermissionError):
            continue
    return signalled
