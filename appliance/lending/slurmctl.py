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
from datetime import UTC, datetime

from appliance.inventory.models import Pool
from appliance.telemetry.placements import Placement, Unavailable

WAITED_STATES = "RUNNING,CONFIGURING,COMPLETING,SUSPENDED"
REQUEUED_STATES = ("RUNNING", "CONFIGURING", "SUSPENDED")


class SlurmCommandError(Exception):
    """A Slurm command failed; the message names it and what it printed."""


def _client(appliance, *argv: str, timeout: float = 20) -> str:
    if appliance.simulated:
        from appliance.simulation import slurm

        if not slurm.conf_path().is_file():
            raise SlurmCommandError(f"{shlex.join(argv)}: the simulated Slurm is not configured here "
                                    f"({slurm.conf_path()} does not exist): run the workloads stage and start it")
        try:
            return slurm.client(*argv, timeout=timeout).stdout
        except (slurm.SlurmError, subprocess.TimeoutExpired) as exc:
            raise SlurmCommandError(str(exc)) from None
    try:
        result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False, env=dict(os.environ))
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


def _gpu_count(gres: str) -> int:
    """GPUs in a GRES or TRES list: "gpu:h100:8", "gres/gpu=2", "gpu:3g.40gb:2(IDX:0-1),gpu:h100:1"."""
    total = 0
    for item in gres.split(","):
        item = item.split("(", 1)[0].strip()
        if item.startswith("gres/gpu") and "=" in item and ":" not in item.split("=", 1)[0]:
            count = item.split("=", 1)[1]
        elif item.startswith("gpu:"):
            count = item.rsplit(":", 1)[1]
        else:
            continue
        total += int(count) if count.isdigit() else 0
    return total


# Job states in which a job has not ended: scontrol's EndTime is then when its time limit runs out, not an end.
UNFINISHED_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "COMPLETING", "REQUEUED",
                               "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED",
                               "RESV_DEL_HOLD"})



def job_pairs(line: str) -> list[list[str]]:
    """The key=value words of one `scontrol --oneliner show job` line, in order (a value may hold spaces:
    JobName; a key may repeat: Nodes= and GRES= once per node with --details)."""
    pairs: list[list[str]] = []
    for word in line.split(" "):
        key, equals, value = word.partition("=")
        if equals and key and not key.startswith("("):
            pairs.append([key, value])
        elif pairs and word:
            pairs[-1][1] += " " + word
    return pairs

def job_details(appliance, job: str) -> dict | None:
    """What Slurm says about job `job` (its id checked by the caller): {job, user, name, partition, nodes,
    gpus, gpu_indices: {node: "0-1"}, start, end, limit_end, state, source}, from `scontrol --details show job`
    while slurmctld knows it, else from sacct where accounting is kept; None when neither knows it. `end` is
    None until the job has ended (a running job's EndTime is its time limit: that is `limit_end`)."""
    try:
        output = _client(appliance, "scontrol", "--details", "--oneliner", "show", "job", job)
    except SlurmCommandError as exc:
        if "Invalid job id" not in str(exc):
            raise
        output = ""
    line = output.strip().splitlines()[0] if output.strip() else ""
    if line:
        fields, indices, node = {}, {}, ""
        for key, value in job_pairs(line):
            fields.setdefault(key, value)
            if key == "Nodes":
                node = value
            elif key == "GRES" and node and "IDX:" in value:
                indices[node] = ",".join(part.split("IDX:", 1)[1].rstrip(")") for part in value.split(",gpu")
                                         if "IDX:" in part)
        nodelist = fields.get("NodeList", "")
        nodes = _client(appliance, "scontrol", "show", "hostnames", nodelist).split() if nodelist else []
        gpus = _gpu_count(fields.get("JOB_GRES", "")) or _gpu_count(fields.get("TRES", ""))
        when = {key: (None if fields.get(key) in (None, "Unknown", "None") else fields[key])
                for key in ("StartTime", "EndTime")}
        state = fields.get("JobState", "")
        unfinished = state in UNFINISHED_STATES
        return {"job": job, "user": fields.get("UserId", "").split("(", 1)[0], "name": fields.get("JobName", ""),
                "partition": fields.get("Partition", ""), "nodes": nodes, "gpus": gpus, "gpu_indices": indices,
                "start": when["StartTime"], "end": None if unfinished else when["EndTime"],
                "limit_end": when["EndTime"] if unfinished else None, "state": state, "source": "scontrol"}
    try:
        output = _client(appliance, "sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={job}",
                         "--format=JobID,User,JobName,Partition,NodeList,AllocTRES,Start,End,State")
    except SlurmCommandError:
        return None
    for row in output.splitlines():
        values = row.split("|")
        if len(values) == 9 and values[0] == job:
            nodes = _client(appliance, "scontrol", "show", "hostnames", values[4]).split() \
                if values[4] and values[4] != "None assigned" else []
            return {"job": job, "user": values[1], "name": values[2], "partition": values[3], "nodes": nodes,
                    "gpus": _gpu_count(values[5]), "gpu_indices": {},
                    "start": None if values[6] in ("Unknown", "None") else values[6],
                    "end": None if values[7] in ("Unknown", "None") else values[7], "limit_end": None,
                    "state": values[8].split(" ", 1)[0], "source": "sacct"}
    return None


# The ingest waits for this answer (at most once a node every half minute): a controller that hangs must
# not hold a write for the 20 s the plans' commands may take.
PLACEMENT_TIMEOUT_S = 5.0


def _slurm_time(text: str):
    """squeue's StartTime/EndTime (ISO 8601 in the client's local time, or Unknown/N/A/None) as aware UTC."""
    text = text.strip()
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except ValueError:
        return None


def node_placements(node):
    """The training pool's jobs on `node` as Slurm says (telemetry.placements' provider): every job
    slurmctld still knows that holds or held the node, its array or heterogeneous id and its plain job id
    both, started and (once finished) ended. None for a node outside a training pool; Unavailable when
    Slurm does not answer."""
    membership = getattr(node, "pool_membership", None)
    if membership is None or membership.pool.kind != Pool.Kind.TRAINING:
        return None
    try:
        output = _client(node.appliance, "squeue", "--noheader", "--states=all", f"--nodelist={node.name}",
                         "--format=%i|%A|%T|%S|%e", timeout=PLACEMENT_TIMEOUT_S)
    except (SlurmCommandError, OSError) as exc:  # OSError: no squeue where the simulation runs it
        raise Unavailable(str(exc)) from None
    found = []
    for line in output.splitlines():
        words = [word.strip() for word in line.split("|")]
        if len(words) != 5 or words[2] == "PENDING":
            continue
        start = _slurm_time(words[3])
        end = None if words[2] in UNFINISHED_STATES else _slurm_time(words[4])
        for job in dict.fromkeys(words[:2]):
            if job:
                found.append(Placement(job, start, end))
    return found
