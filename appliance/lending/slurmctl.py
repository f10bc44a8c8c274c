"""The few Slurm commands a lending plan runs: drain, list running jobs, requeue, resume, node states.

On a simulated appliance they go to the simulation's real slurmctld (its slurm.conf through SLURM_CONF);
on a real one to the site's Slurm, with the client commands and configuration of the host the appliance
runs on (its management node, the Slurm controller's host). Node names reach the command line only after
services checked them against the inventory; arguments are passed as a list, never through a shell.
"""

from __future__ import annotations

import os
import shlex
import subprocess

WAITED_STATES = "RUNNING,CONFIGURING,COMPLETING,SUSPENDED"
REQUEUED_STATES = ("RUNNING", "CONFIGURING", "SUSPENDED")


class SlurmCommandError(Exception):
    """A Slurm command failed; the message names it and what it printed."""


def _client(appliance, *argv: str) -> str:
    if appliance.simulated:
        from appliance.simulation import slurm

        if not slurm.conf_path().is_file():
            raise SlurmCommandError(f"{shlex.join(argv)}: the simulated Slurm is not configured here "
                                    f"({slurm.conf_path()} does not exist): run the workloads stage and start it")
        try:
            return slurm.client(*argv, timeout=20).stdout
        except (slurm.SlurmError, subprocess.TimeoutExpired) as exc:
            raise SlurmCommandError(str(exc)) from None
    try:
        result = subprocess.run(list(argv), capture_output=True, text=True, timeout=20, check=False, env=dict(os.environ))
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmCommandError(f"{shlex.join(argv)}: {exc}") from None
    if result.returncode != 0:
        raise SlurmCommandError(f"{shlex.join(argv)} exited {result.returncode}: "
                                f"{(result.stderr or result.stdout).strip()}")
    return result.stdout


def drain(appliance, nodes: list[str], reason: str) -> None:
    _client(appliance, "scontrol", "update", f"NodeName={','.join(nodes)}", "State=DRAIN", f"Reason={reason}")


def resume(appliance, nodes: list[str]) -> None:
    _client(appliance, "scontrol", "update", f"NodeName={','.join(nodes)}", "State=RESUME")


def jobs_on(appliance, nodes: list[str]) -> list[dict]:
    """Jobs still holding any of the nodes: [{"id", "state", "nodes"}]."""
    output = _client(appliance, "squeue", "--noheader", f"--nodelist={','.join(nodes)}", f"--states={WAITED_STATES}",
                     "--format=%i %T %N")
    jobs = []
    for line in output.splitlines():
        words = line.split()
        if len(words) >= 2:
            jobs.append({"id": words[0], "state": words[1], "nodes": words[2] if len(words) > 2 else ""})
    return jobs


def requeue(appliance, job_ids: list[str]) -> None:
    _client(appliance, "scontrol", "requeue", ",".join(job_ids))


def node_states(appliance, nodes: list[str]) -> dict[str, str]:
    """{node: state} as sinfo reports it (idle, drained, draining, mixed, ...)."""
    output = _client(appliance, "sinfo", "--noheader", "--Node", f"--nodes={','.join(nodes)}", "--format=%N %T")
    states = {}
    for line in output.splitlines():
        name, _, state = line.partition(" ")
        states[name] = state.strip()
    return states


def job_users(appliance, job_ids: list[str]) -> dict[str, str]:
    """{job id: user} of the jobs named, as Slurm reports them: squeue for the jobs slurmctld still knows
    (running, pending, and finished ones for MinJobAge), then sacct for the rest where accounting is kept
    (an error there, as on a cluster without accounting storage, only leaves them out). The ids are checked
    by the caller (digits, an array's _index); they reach the command line as list items."""
    wanted = set(job_ids)
    if not wanted:
        return {}
    users = {}
    output = _client(appliance, "squeue", "--noheader", "--states=all", "--format=%i|%A|%u")
    for line in output.splitlines():
        shown, _, rest = line.strip().partition("|")
        base, _, user = rest.partition("|")
        user = user.strip()
        for job in (shown, base):
            if job in wanted and user:
                users[job] = user
    missing = sorted(wanted - set(users))
    if missing:
        try:
            output = _client(appliance, "sacct", "--noheader", "--parsable2", "--allocations",
                             f"--jobs={','.join(missing)}", "--format=JobID,User")
        except SlurmCommandError:
            output = ""
        for line in output.splitlines():
            job, _, user = line.strip().partition("|")
            if job in wanted and user.strip():
                users.setdefault(job, user.strip())
    return users
