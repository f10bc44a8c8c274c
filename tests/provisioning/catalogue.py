"""A stage catalogue of the engine's own test playbooks, for driving the engine without the product's
playbooks (also named in APPLIANCE_PROVISIONING_CATALOGUE for a Celery worker in the tests)."""

from pathlib import Path

from appliance.provisioning.catalogue import Catalogue, Stage

PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"


# What the probe playbook is told to do (probe_fail_on, probe_sleep, probe_loop, probe_gpus, ...):
# tests set it; a provider reads it when the stage starts.
PROBE_VARS: dict = {}


def probe_vars(run, nodes):
    return {"probe_run": run.pk, **PROBE_VARS}


CATALOGUE = Catalogue([
    Stage("first", str(PLAYBOOKS / "probe.yml"), "first probe", vars_provider=probe_vars),
    Stage("second", str(PLAYBOOKS / "probe.yml"), "second probe", vars_provider=probe_vars),
    Stage("gpu-only", str(PLAYBOOKS / "probe.yml"), "gpu nodes only", roles=frozenset({"gpu"}),
          vars_provider=probe_vars),
])
