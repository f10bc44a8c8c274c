import os
import subprocess

import pytest

from appliance.inventory.endpoints import endpoint_of
from appliance.inventory.models import BMC, Appliance, Credential, Node, Platform
from appliance.inventory.platforms import load_platform


def free_port() -> int:
    # Not port 0's pick: that is an ephemeral port, which a client connection of any process may take
    # while a test has its emulator stopped.
    from appliance.simulation.ports import free_port as below_the_ephemeral_range

    return below_the_ephemeral_range()


@pytest.fixture
def sim_settings(settings, tmp_path):
    """A private state directory: nothing a test does lands in another test's (or the host's) files."""
    settings.STATE_DIR = tmp_path / "state"
    settings.SIMULATION_DIR = settings.STATE_DIR / "simulation"
    settings.STATE_DIR.mkdir()
    return settings


@pytest.fixture
def make_appliance(db, sim_settings):
    def sim_credential(url: str) -> Credential:
        """The simulation's BMC login (its password and CA), bound to one more emulator."""
        from appliance.simulation import bmc

        credential, _ = Credential.objects.get_or_create(name="sim-bmc", defaults={
            "username": bmc.USERNAME, "secret": bmc.password(), "ca_file": str(bmc.ca_path())})
        credential.endpoints = [*credential.endpoints, endpoint_of(url)]
        credential.save()
        return credential

    def make(nodes=(("gpu01", "hgx-h100-8gpu"),), name="sim"):
        appliance = Appliance.objects.create(name=name, simulated=True)
        created = []
        for position, (node_name, slug) in enumerate(nodes):
            spec = load_platform(slug)
            platform, _ = Platform.objects.get_or_create(slug=slug, defaults=spec.row_values())
            node = Node.objects.create(
                appliance=appliance, name=node_name, role=spec.spec.get("role", "gpu"), platform=platform,
                management_address=f"10.99.0.{position + 10}",
                sysroot=str(sim_settings.SIMULATION_DIR / "nodes" / node_name))
            url = f"https://127.0.0.1:{free_port()}"
            BMC.objects.create(node=node, url=url, credential=sim_credential(url))
            created.append(node)
        return appliance, created

    return make


@pytest.fixture
def prepared(make_appliance):
    from appliance.simulation import services

    appliance, nodes = make_appliance()
    services.prepare_appliance(appliance)
    return nodes[0]


@pytest.fixture
def run_tool(request):
    """Run a simulated command on a node (the `prepared` one by default) as a playbook would: through PATH."""
    from appliance.simulation import services

    def run(*argv, node=None, check=True):
        node = node or request.getfixturevalue("prepared")
        environment = {**os.environ, **services.node_environment(node)}
        result = subprocess.run(list(argv), capture_output=True, text=True, env=environment, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"{argv} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result

    return run
