"""The stages' playbooks on one simulated HGX H100 node, in order: a dry run changes nothing, each stage
does its work (checked in the node's state, its files and over Redfish), a second run changes nothing,
and every fault ends in one message naming the node and what went wrong.

The tests of this module share one node and run in file order, as a bootstrap does."""

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from .conftest import NODE, free_port

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def tree_digest(root: Path) -> dict[str, str]:
    """path -> sha256 of every file under root (the lock file is touched by readers: left out)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.endswith(".lock")}


def test_a_dry_run_reports_changes_and_changes_nothing(simulated_appliance):
    sim = simulated_appliance
    files_before, bios_before = tree_digest(sim.sysroot), sim.redfish_bios()

    run = sim.run("site.yml", "--check", "--diff", extra_vars=sim.stage_vars)

    assert run.returncode == 0, run.output
    assert run.changed() > 10
    assert tree_digest(sim.sysroot) == files_before
    assert sim.redfish_bios() == bios_before
    assert "would change" in run.output and "SysProfile PerfPerWattOptimizedDapc -> PerfOptimized" in run.output
    assert 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX intel_iommu=on iommu=pt' in run.output  # the diff


def test_firmware_brings_the_bios_to_the_baseline(simulated_appliance):
    sim = simulated_appliance
    baseline = sim.platform["bios"]["baseline"]
    factory = {name: definition["factory"] for name, definition in sim.registry["attributes"].items()}

    run = sim.run("stages/firmware.yml")

    assert run.returncode == 0, run.output
    bios = sim.redfish_bios()
    assert {name: bios[name] for name in baseline} == baseline
    facts = run.facts[NODE]
    expected_changes = [{"attribute": name, "old": factory[name], "new": value}
                        for name, value in sorted(baseline.items()) if factory[name] != value]
    assert facts["appliance_bios_changes"] == expected_changes
    assert {name: facts["appliance_bios"][name] for name in baseline} == baseline
    assert facts["appliance_bmc"]["bios_uri"].endswith("/BIOS")  # the emulator's link, followed
    assert sim.bmc_password not in run.output


def test_os_stage_tunes_the_node(simulated_appliance):
    sim = simulated_appliance

    run = sim.run("stages/os.yml")

    assert run.returncode == 0, run.output
    state = sim.state()
    for parameter in sim.platform["os"]["kernel_cmdline"]:
        assert parameter in state["kernel"]["cmdline"].split()
    assert "intel_iommu=on" in (sim.sysroot / "etc/default/grub.d/appliance.cfg").read_text()
    assert "*       hard    memlock    unlimited" in (
        sim.sysroot / "etc/security/limits.d/90-appliance-rdma.conf").read_text()
    assert "blacklist nouveau" in (sim.sysroot / "etc/modprobe.d/blacklist-nouveau.conf").read_text()
    assert "nouveau" not in state["modules"]
    assert state["cpu_governor"] == "performance"
    assert {bridge["acs_ctrl"] for bridge in state["pcie_bridges"]} == {"0000"}
    for unit in ("chrony.service", "appliance-disable-acs.service", "appliance-cpu-governor.service"):
        assert state["services"][unit] == {"enabled": True, "active": True}, unit


def test_gpu_stage_installs_the_driver_stack_verified_through_nvml(simulated_appliance):
    sim = simulated_appliance
    software = sim.platform["software"]

    run = sim.run("stages/gpu.yml")

    assert run.returncode == 0, run.output
    state = sim.state()
    assert state["packages"]["nvidia-driver-550-server"] == software["driver_version"]
    assert {"nvidia", "nvidia_uvm"} <= set(state["modules"])
    for unit in ("nvidia-persistenced.service", "nvidia-fabricmanager.service", "nvidia-dcgm.service"):
        assert state["services"][unit] == {"enabled": True, "active": True}, unit
    facts = run.facts[NODE]
    assert facts["appliance_driver"]["version"] == software["driver_version"]
    gpus = facts["appliance_gpus"]
    assert [g["uuid"] for g in gpus] == [g["uuid"] for g in state["gpus"]]
    assert {g["name"] for g in gpus} == {sim.platform["gpu"]["model"]}
    assert all(g["persistence_mode"] for g in gpus)


def test_fabric_and_gpudirect_stages_verify_ports_modules_and_affinity(simulated_appliance):
    sim = simulated_appliance
    for playbook in ("stages/fabric.yml", "stages/gpudirect.yml", "stages/storage.yml"):
        run = sim.run(playbook, extra_vars=sim.stage_vars)
        assert run.returncode == 0, run.output
    state = sim.state()
    assert {"nvidia_peermem", "nvidia_fs"} <= set(state["modules"])


def test_monitoring_deploys_the_collector_that_the_simulation_then_runs(simulated_appliance):
    from appliance.simulation import services

    sim = simulated_appliance

    run = sim.run("stages/monitoring.yml", extra_vars=sim.stage_vars)

    assert run.returncode == 0, run.output
    assert sim.state()["services"]["appliance-collector.service"] == {"enabled": True, "active": True}
    # As the engine does right after this stage on a simulated appliance (a real node's systemd runs it).
    started = services.start_collectors(sim.node.appliance)
    assert isinstance(started[NODE], int), started


def test_acceptance_passes_and_reports_every_check(simulated_appliance):
    sim = simulated_appliance

    run = sim.run("stages/acceptance.yml")

    assert run.returncode == 0, run.output
    checks = run.facts[NODE]["appliance_acceptance"]
    names = {c["check"] for c in checks}
    assert {"gpu.count", "gpu.model", "gpu.memory_mib", "driver.version", "gpu.persistence_mode",
            "nvlink.links_up", "pcie.link_width", "gpu.retired_pages", "os.kernel_cmdline",
            "os.nouveau_unloaded", "os.memlock", "service.chrony", "service.nvidia-persistenced",
            "service.nvidia-fabricmanager", "service.nvidia-dcgm", "bios.SysProfile",
            "service.appliance-collector", "collector.metrics", "collector.gpu_util_series"} <= names
    assert [c for c in checks if not c["passed"]] == []
    assert all(c["node"] == NODE and c["source"] for c in checks)


def test_a_second_run_changes_nothing(simulated_appliance):
    run = simulated_appliance.run("site.yml", extra_vars=simulated_appliance.stage_vars)

    assert run.returncode == 0, run.output
    assert run.changed() == 0, run.output


def test_an_acceptance_fault_is_named_with_expected_and_measured(simulated_appliance):
    from appliance.simulation import services

    sim = simulated_appliance
    services.inject_fault(sim.node, "gpu_missing", index=7)
    try:
        run = sim.run("stages/acceptance.yml")
    finally:
        services.clear_faults(sim.node)

    assert run.returncode != 0
    assert "gpu.count expected 8, measured 7" in run.output
    checks = {c["check"]: c for c in run.facts[NODE]["appliance_acceptance"]}
    assert not checks["gpu.count"]["passed"] and checks["os.memlock"]["passed"]


def test_an_unknown_bios_attribute_stops_before_anything_is_sent(simulated_appliance):
    sim = simulated_appliance
    platform = json.loads(json.dumps(sim.platform))
    platform["bios"]["baseline"] = {"SysProfile": "Custom", "TurboBoost3": "Enabled"}
    bios_before = sim.redfish_bios()

    run = sim.run("stages/firmware.yml", host_vars={"platform": platform})

    assert run.returncode != 0
    assert "TurboBoost3: unknown attribute" in run.output
    assert sim.redfish_bios() == bios_before


@pytest.mark.parametrize("fault, message", [
    ("wrong password", "rejected the credentials of user 'admin' (HTTP 401"),
    ("unreachable", "is unreachable"),
    ("foreign CA", "TLS verification failed"),
])
def test_bmc_faults_end_in_one_message_naming_node_and_url(simulated_appliance, tmp_path, fault, message):
    sim = simulated_appliance
    bmc = dict(sim.host_vars["bmc"])
    password = None
    if fault == "wrong password":
        password = "not-the-password"
    elif fault == "unreachable":
        bmc["url"] = f"https://127.0.0.1:{free_port()}"
    else:
        foreign = tmp_path / "foreign-ca.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=someone else", "-keyout", str(tmp_path / "key.pem"), "-out", str(foreign)],
                       check=True, capture_output=True)
        bmc["ca_file"] = str(foreign)

    run = sim.run("stages/firmware.yml", host_vars={"bmc": bmc}, password=password)

    assert run.returncode != 0
    line = next(line for line in run.output.splitlines() if message in line)
    assert f"{NODE}: BMC {bmc['url']}" in line
    assert sim.bmc_password not in run.output


def test_a_node_that_slurm_conf_no_longer_names_has_slurmd_stopped_and_disabled(simulated_appliance):
    """The workloads stage on a node outside the Slurm cluster (this node is in no pool): a node that never
    had Slurm is left as it is; one that was a Slurm node (a training node lent out, an inference node lent
    in and returned) has its slurmd stopped and disabled, since slurmctld no longer knows it."""
    import os

    sim = simulated_appliance
    env = {**os.environ, **sim.host_vars["node_environment"]}

    def systemctl(*args):
        return subprocess.run(["systemctl", *args], env=env, capture_output=True, text=True).stdout.strip()

    run = sim.run("stages/workloads.yml")
    assert run.returncode == 0, run.output
    assert run.changed() == 0, run.output
    assert systemctl("show", "-p", "LoadState", "--value", "slurmd") == "not-found"

    subprocess.run(["apt-get", "install", "-y", "slurmd"], env=env, check=True, capture_output=True)
    (sim.sysroot / "etc/slurm").mkdir(parents=True, exist_ok=True)
    (sim.sysroot / "etc/slurm/slurm.conf").write_text(f"SlurmctldHost=mgmt01\nNodeName={NODE} Gres=gpu:h100:8\n")
    subprocess.run(["systemctl", "enable", "--now", "slurmd"], env=env, check=True, capture_output=True)
    assert (systemctl("is-enabled", "slurmd"), systemctl("is-active", "slurmd")) == ("enabled", "active")

    run = sim.run("stages/workloads.yml")
    assert run.returncode == 0, run.output
    assert run.changed() == 1, run.output
    assert (systemctl("is-enabled", "slurmd"), systemctl("is-active", "slurmd")) == ("disabled", "inactive")
    again = sim.run("stages/workloads.yml")
    assert (again.returncode, again.changed()) == (0, 0), again.output
