"""A one-node simulated appliance and a runner of `ansible-playbook` for the stage tests.

The appliance is created directly in the database (Platform, Appliance, Node, BMC rows) inside a
transaction rolled back at the end of the module, prepared by the simulation (sysroot, state file,
simulated tools and NVML, a real Redfish emulator as BMC), and driven by the real playbooks through
`ansible-playbook` with the Mitogen strategy, exactly as the provisioning engine runs them.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import ansible_runner
import pytest
from django.conf import settings
from django.db import transaction
from django.test.utils import override_settings
from ruamel.yaml import YAML

from tests.playbooks.deprecations import assert_no_new_deprecation

NODE = "pbt-gpu01"
PLATFORM = "hgx-h100-8gpu"
RECAP = re.compile(r"^(?P<host>\S+)\s+: ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)"
                   r"\s+failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)\s+rescued=(?P<rescued>\d+)"
                   r"\s+ignored=(?P<ignored>\d+)", re.MULTILINE)


def load_yaml(path: Path):
    return YAML(typ="safe").load(path.read_text())


def free_port() -> int:
    # Not port 0's pick: an ephemeral port may be taken by any client connection while an emulator restarts.
    from appliance.simulation.ports import free_port as below_the_ephemeral_range

    return below_the_ephemeral_range()


def mitogen_strategy_path() -> str:
    import ansible_mitogen

    return str(Path(ansible_mitogen.__file__).parent / "plugins" / "strategy")


@dataclass
class PlaybookRun:
    returncode: int
    output: str
    recap: dict[str, dict[str, int]]
    facts: dict[str, dict]

    def changed(self, host: str = NODE) -> int:
        return self.recap[host]["changed"]

    def failed(self, host: str = NODE) -> int:
        return self.recap[host]["failed"]


@dataclass
class SimulatedAppliance:
    node: object
    sysroot: Path
    workdir: Path
    bmc_url: str
    bmc_password: str
    platform: dict
    registry: dict
    host_vars: dict = field(default_factory=dict)
    stage_vars: dict = field(default_factory=dict)  # what the fabric, gpudirect, storage, monitoring providers render
    package_repository: dict = field(default_factory=dict)  # repository.playbook_vars: where the node installs from
    runs: int = 0

    def state(self) -> dict:
        return json.loads((self.sysroot / "var/lib/appliance-sim/state.json").read_text())

    def redfish_bios(self) -> dict:
        """The BIOS attributes the BMC reports now, read over HTTPS as the playbooks read them."""
        sys.path.insert(0, str(Path(settings.COLLECTION_DIR) / "plugins" / "module_utils"))
        try:
            from appliance_bios import read_bios
            from appliance_redfish import RedfishClient
        finally:
            sys.path.pop(0)
        bmc = self.host_vars["bmc"]
        with RedfishClient(bmc["url"], bmc["username"], self.bmc_password, NODE, verify_tls=True,
                           ca_file=bmc["ca_file"]) as client:
            return read_bios(client)[2]

    def run(self, playbook: str, *arguments: str, host_vars: dict | None = None,
            password: str | None = None, extra_vars: dict | None = None) -> PlaybookRun:
        """Run playbooks/<playbook> on the node; `host_vars` override the inventory's for this run."""
        self.runs += 1
        run_dir = self.workdir / f"run{self.runs}"
        run_dir.mkdir()
        variables = {**self.host_vars, **(host_vars or {})}
        inventory = {"all": {"hosts": {NODE: variables}}}
        (run_dir / "inventory.json").write_text(json.dumps(inventory))
        secrets = run_dir / "secrets.json"
        secrets.touch(mode=0o600)
        secrets.write_text(json.dumps({"bmc_password": self.bmc_password if password is None else password}))
        # The platform's BMC stages BIOS values until a reset: the firmware stage restarts it inside this window.
        always = {"window": {"start": "00:00", "end": "24:00"}}
        extra = {"appliance": {"name": "pbtest", "settings": {"maintenance": always}}, "networks": [],
                 "filesystems": [], "pools": [], "package_repository": self.package_repository, **(extra_vars or {})}
        (run_dir / "extra.json").write_text(json.dumps(extra))
        venv_bin = Path(sys.executable).parent
        environment = {
            "PATH": f"{venv_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(run_dir),
            "LANG": "C.UTF-8",
            "ANSIBLE_CONFIG": str(Path(settings.PLAYBOOKS_DIR) / "ansible.cfg"),
            "ANSIBLE_STRATEGY_PLUGINS": mitogen_strategy_path(),
            "ANSIBLE_STRATEGY": "mitogen_linear",
            "ANSIBLE_LOCAL_TEMP": str(run_dir / "tmp"),
            "ANSIBLE_HOME": str(run_dir / "ansible-home"),
            "ANSIBLE_NOCOLOR": "1",
        }
        # ansible-runner, as the engine uses it: the facts are read from the runner_on_ok events.
        (run_dir / "runner").mkdir()
        runner = ansible_runner.run(
            private_data_dir=str(run_dir / "runner"), project_dir=str(settings.PLAYBOOKS_DIR),
            playbook=str(Path(settings.PLAYBOOKS_DIR) / playbook), inventory=str(run_dir / "inventory.json"),
            cmdline=" ".join(["-e", f"@{run_dir / 'extra.json'}", "-e", f"@{secrets}", *arguments]),
            envvars=environment, quiet=True, timeout=300)
        secrets.unlink()
        output = runner.stdout.read()
        (run_dir / "output.txt").write_text(output)
        # Deprecation warnings are on (ansible.cfg): a new one fails the stage test that met it.
        assert_no_new_deprecation(output, playbook)
        recap = {m["host"]: {k: int(v) for k, v in m.groupdict().items() if k != "host"}
                 for m in RECAP.finditer(output)}
        facts: dict[str, dict] = {}
        for event in runner.events:
            data = event.get("event_data", {})
            if event.get("event") == "runner_on_ok" and isinstance(data.get("res"), dict):
                facts.setdefault(data.get("host"), {}).update(data["res"].get("ansible_facts") or {})
        return PlaybookRun(runner.rc, output, recap, facts)


@pytest.fixture(scope="module")
def simulated_appliance(django_db_setup, django_db_blocker, tmp_path_factory):
    from appliance.inventory.models import BMC, Appliance, Credential, Node, Platform
    from appliance.inventory.platforms import load_platform
    from appliance.provisioning.playbook_vars import connection_vars
    from appliance.simulation import repository_server, services
    from tests.conftest import traversable

    workdir = traversable(tmp_path_factory.mktemp("playbooks"))
    simulation_dir = workdir / "simulation"
    with django_db_blocker.unblock(), override_settings(SIMULATION_DIR=simulation_dir):
        atomic = transaction.atomic()
        atomic.__enter__()
        try:
            spec = load_platform(PLATFORM)
            platform_row = Platform.objects.create(slug=spec.slug, **spec.row_values())
            services.ensure_credentials()
            appliance = Appliance.objects.create(name="pbtest", simulated=True)
            sysroot = simulation_dir / "nodes" / NODE
            node = Node.objects.create(appliance=appliance, name=NODE, role="gpu", platform=platform_row,
                                       management_address="192.168.250.11", sysroot=str(sysroot))
            password = (simulation_dir / "bmc-password").read_text().strip()
            bmc_url = f"https://127.0.0.1:{free_port()}"
            ca_file = str(simulation_dir / "ca" / "ca.pem")
            credential = Credential.objects.create(name="pbtest-bmc", username="admin", secret=password,
                                                   endpoints=[f"{bmc_url}"], ca_file=ca_file)
            BMC.objects.create(node=node, url=bmc_url, credential=credential, verify_tls=True)
            services.prepare_appliance(appliance)
            services.start_bmcs(appliance)
            services.start_ssh(appliance)  # the node is reached over SSH, as the engine reaches it
            from appliance.provisioning import repository

            # The nodes install from the appliance's repository, served by the simulated management node.
            repository.ensure_built()
            services.start_repository()
            try:
                platform = spec.spec
                registry = load_yaml(Path(settings.FIRMWARE_DIR) / "registries" / platform["bios"]["registry"])
                simulated = SimulatedAppliance(node=node, sysroot=sysroot, workdir=workdir, bmc_url=bmc_url,
                                               bmc_password=password, platform=platform, registry=registry)
                simulated.host_vars = {
                    # Over SSH as the unprivileged login account, with become, as the engine reaches it.
                    **connection_vars(node, True),
                    "sysroot": str(sysroot),
                    "node_role": "gpu",
                    "simulated": True,
                    "node_environment": services.node_environment(node),
                    "management_address": node.management_address,
                    "ipoib_addresses": {},
                    "platform": platform,
                    "bios_registry": registry,
                    "bmc": {"url": bmc_url, "username": "admin", "verify_tls": True, "ca_file": ca_file},
                    "appliance_node_python": str(sysroot / "opt/appliance/python/bin/python3"),
                }
                simulated.package_repository = repository.playbook_vars(appliance)
                from appliance.partitioning.renderers import stage_vars

                # One GPU node and no management node: the subnet manager is the site's external one.
                appliance.settings = {"fabric": {"subnet_manager": {"kind": "external"}}}
                appliance.save()
                from appliance.telemetry import stage_vars as monitoring
                from appliance.telemetry import tokens

                # The monitoring stage's token is a secret of the run in the engine; here it rides with the
                # other variables of the test's own ansible-playbook.
                simulated.stage_vars = {**stage_vars.fabric_vars(appliance), **stage_vars.gpudirect_vars(appliance),
                                        **stage_vars.storage_vars(appliance), **monitoring.monitoring_vars(appliance, [node]),
                                        monitoring.TOKENS_VAR: {NODE: tokens.collector_token(node)}}
                yield simulated
            finally:
                services.stop_collectors(appliance)
                services.stop_ssh(appliance)
                services.stop_bmcs(appliance)
                repository_server.stop()
        finally:
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)
