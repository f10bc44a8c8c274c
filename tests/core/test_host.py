"""The host's packages (appliance/core/host.py): one list per use in .requirements/debian-<use>.txt, read by
the README's set-up command and tests/run; every host program the product runs is declared with its
package, and the bootstrap refuses, before it changes anything, on a host that lacks one."""

import ast
import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from appliance.core import host

ROOT = Path(__file__).resolve().parents[2]
APPLIANCE = ROOT / "appliance"


def listed(use: str) -> list[str]:
    lines = (ROOT / ".requirements" / f"debian-{use}.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_each_use_lists_every_package_of_the_use_before_it():
    runtime, simulation, test = listed("runtime"), listed("simulation"), listed("test")
    assert set(runtime) <= set(simulation) <= set(test)
    # What the README's bootstrap command installed before the list existed is still there, Slurm added.
    assert {"python3-venv", "python3-pip", "python3-dev", "gcc", "pkg-config", "libvirt-dev", "openssh-server",
            "openssh-client", "sudo", "slurmctld", "slurmd", "slurm-client"} <= set(simulation)
    for use in host.USES:
        names = listed(use)
        assert len(names) == len(set(names)), f"debian-{use}.txt names a package twice"
        assert all(re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", name) for name in names), names


@pytest.mark.parametrize("use", host.USES)
def test_every_program_of_a_use_is_brought_by_that_use_s_list(use):
    packages = set(listed(use))
    unlisted = [f"{program.name} ({program.package})" for program in host.programs(use)
                if program.package not in packages]
    assert unlisted == [], f".requirements/debian-{use}.txt lacks the package of {unlisted}"


def test_the_uses_are_cumulative_and_slurm_belongs_to_the_simulation():
    assert [p.name for p in host.programs("runtime")] == ["ssh"]
    simulation = {p.name for p in host.programs("simulation")}
    assert {"ssh", "slurmctld", "slurmd", "sbatch", "scontrol", "sshd", "sudo", "gcc", "unshare"} <= simulation
    assert "chromium" not in simulation
    assert "chromium" in {p.name for p in host.programs("test")}
    with pytest.raises(ValueError, match="unknown use 'desktop'"):
        host.programs("desktop")


SUBPROCESS_CALLS = {"run", "Popen", "check_output", "check_call", "call"}
HOST_PATH = re.compile(r"/usr/s?bin/[A-Za-z0-9._+-]+")
# Folders whose strings are text written for the nodes (configuration, unit files, playbook variables), or
# the simulated tools themselves: paths there are not run on the controller.
NOT_RUN_HERE = ("appliance/partitioning/renderers/", "appliance/simulation/tools/")


def programs_the_code_runs() -> dict[str, str]:
    """{program name: first place} for every host program named in product code: an absolute /usr/bin or
    /usr/sbin path, the literal first word of a subprocess call, or the name given to shutil.which."""
    found: dict[str, str] = {}
    for path in sorted(APPLIANCE.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(NOT_RUN_HERE) or relative == "appliance/core/host.py":
            continue
        tree = ast.parse(path.read_text(), relative)
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and HOST_PATH.fullmatch(node.value):
                name = Path(node.value).name
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                owner = node.func.value.id if isinstance(node.func.value, ast.Name) else None
                first = node.args[0]
                if owner == "shutil" and node.func.attr == "which" and isinstance(first, ast.Constant):
                    name = first.value
                elif (owner == "subprocess" and node.func.attr in SUBPROCESS_CALLS and isinstance(first, ast.List)
                      and first.elts and isinstance(first.elts[0], ast.Constant)):
                    name = Path(first.elts[0].value).name
            if name:
                found.setdefault(name, f"{relative}:{node.lineno}")
    return found


def test_every_host_program_the_product_runs_is_declared_with_its_package():
    found = programs_the_code_runs()
    # The scan sees what it must (a constant path, a literal argv[0], a which), so a new one cannot hide.
    assert {"unshare", "scancel", "python3", "systemd-analyze"} <= set(found)
    declared = {program.name for program in host.PROGRAMS}
    # systemd-analyze: the production installer uses it only where it is (to verify the units it wrote).
    optional = {"systemd-analyze"}
    undeclared = {name: where for name, where in found.items() if name not in declared | optional}
    assert undeclared == {}, f"host programs run by the product but not declared in appliance/core/host.py: {undeclared}"


def test_require_names_each_missing_program_its_package_and_the_install_command(monkeypatch):
    monkeypatch.setattr(host, "PROGRAMS", (
        host.Program("/usr/bin/ssh", "openssh-client", "runtime", "present"),
        host.Program("/nonexistent/bin/slurmctld-x", "slurmctld-x", "simulation", "absent"),
        host.Program("no-such-program-x", "tool-x", "simulation", "absent on the PATH"),
        host.Program("/nonexistent/bin/browser-x", "browser-x", "test", "not needed by the simulation"),
    ))
    assert host.missing("runtime") == []
    with pytest.raises(host.HostNotReady) as refused:
        host.require("simulation")
    assert str(refused.value) == (
        "the host lacks what the simulation needs: slurmctld-x (slurmctld-x), no-such-program-x (tool-x); "
        "install with: apt-get install -y slurmctld-x tool-x (every package of this use: "
        ".requirements/debian-simulation.txt in a checkout)")


@pytest.mark.django_db
def test_the_bootstrap_refuses_a_host_without_slurm_before_it_changes_anything(monkeypatch, settings, tmp_path):
    from django.contrib.auth import get_user_model

    from appliance.audit.models import AuditRecord
    from appliance.inventory.models import Appliance
    from appliance.provisioning.models import Run

    settings.SIMULATION_DIR = tmp_path / "simulation"
    slurmctld = host.Program("/nonexistent/sbin/slurmctld", "slurmctld", "simulation", "the Slurm controller")
    monkeypatch.setattr(host, "PROGRAMS", (*(p for p in host.PROGRAMS if p.name != "slurmctld"), slurmctld))
    with pytest.raises(CommandError) as refused:
        call_command("bootstrap", "--no-input")
    message = str(refused.value)
    assert message.startswith("the host lacks what the simulation needs: slurmctld (slurmctld); install with: "
                              "apt-get install -y slurmctld (every package of this use"), message
    assert refused.value.returncode == 1
    assert not Appliance.objects.exists()
    assert not get_user_model().objects.exists()
    assert not Run.objects.exists()
    # The refused command is itself audited (the CLI's capture), and nothing else is.
    assert list(AuditRecord.objects.values_list("event", "outcome")) == [("cli.command", "failure")]
    assert not (tmp_path / "simulation").exists()
