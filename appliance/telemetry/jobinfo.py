"""What the apps above telemetry know about a job, for the job pages that show and link it.

Telemetry sits below the scheduler's client (lending), the attribution (analytics) and the model registry
(lifecycle) and may not import them; each registers its answer here in its AppConfig.ready() (the pattern
of provisioning.catalogue.register_provider), and the job pages of telemetry and analytics ask for it:

- SCHEDULER  (job ids, node names, user) -> {"jobs": {job id: facts}, "error": text or ""}: what Slurm says
  (name, user, partition, state, exit code, submit, start, end); services and jobs it does not know absent.
- ATTRIBUTION (job id, first minute, user) -> {"attributed": bool, "url", "next_run", "passed"} or None when
  the user may not see the Efficiency pages.
- VERSIONS   (job id, user) -> [{"label", "url"}]: the model versions the job trained, those the user may see.

An answer nobody registered is the empty one, so telemetry's pages work without the apps above it.
"""

from collections.abc import Callable

SCHEDULER = "scheduler"
ATTRIBUTION = "attribution"
VERSIONS = "versions"
EMPTY = {SCHEDULER: lambda: {"jobs": {}, "error": ""}, ATTRIBUTION: lambda: None, VERSIONS: list}

_PROVIDERS: dict[str, Callable] = {}


def register(kind: str, function: Callable) -> None:
    """Answer `kind` with `function` (an app's ready(); registering again replaces it)."""
    if kind not in EMPTY:
        raise ValueError(f"unknown job information {kind!r}: one of {', '.join(EMPTY)}")
    _PROVIDERS[kind] = function


def ask(kind: str, *args, **kwargs):
    provider = _PROVIDERS.get(kind)
    return provider(*args, **kwargs) if provider is not None else EMPTY[kind]()


def about(job: str, nodes=(), first=None, user=None) -> dict:
    """Everything the job pages show of a job beyond its telemetry: {"slurm": facts or None, "slurm_error",
    "slurm_job": whether the id is one Slurm could have, "attribution", "versions"}."""
    scheduler = ask(SCHEDULER, [job], list(nodes), user)
    return {"slurm": scheduler["jobs"].get(job), "slurm_error": scheduler["error"],
            "slurm_job": job[:1].isdigit(), "attribution": ask(ATTRIBUTION, job, first, user),
            "versions": ask(VERSIONS, job, user)}
