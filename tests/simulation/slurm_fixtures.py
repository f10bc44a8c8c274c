"""The demo appliance imported and prepared in a private state directory, with the Slurm files the workloads
stage generates written where its slurm role writes them (every Slurm node's and the controller's
/etc/slurm under their sysroots). Rendered by the same vars provider the stage runs with
(stage_vars.workloads_vars), without running the playbook: that stage is tested in tests/playbooks."""

from __future__ import annotations

from pathlib import Path

import pytest


def write_stage_files(appliance) -> dict:
    from appliance.partitioning.renderers.stage_vars import workloads_vars

    config = workloads_vars(appliance)["appliance_slurm"]
    for node in appliance.nodes.filter(name__in=[config["controller"], *config["nodes"]]):
        etc = Path(node.sysroot) / "etc" / "slurm"
        etc.mkdir(parents=True, exist_ok=True)
        for name, key in (("slurm.conf", "slurm_conf"), ("gres.conf", "gres_conf"), ("cgroup.conf", "cgroup_conf")):
            (etc / name).write_text(config[key])
    return config


@pytest.fixture
def demo_appliance(settings, tmp_path, db):
    """The bundled demo site, imported, with every node's sysroot and state file (prepare_node) in tmp_path.
    No SSH servers or BMC emulators: nothing here logs in to a node."""
    from appliance.inventory.services import import_site
    from appliance.simulation import services

    settings.STATE_DIR = tmp_path / "state"
    settings.SIMULATION_DIR = settings.STATE_DIR / "simulation"
    settings.STATE_DIR.mkdir()
    services.ensure_demo_credential()
    appliance = import_site(services.demo_site_text(), "demo.yml").appliance
    for node in appliance.nodes.select_related("platform"):
        services.prepare_node(node)
    return appliance
