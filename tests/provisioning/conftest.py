import pytest
import yaml

from appliance.inventory.models import BMC, Appliance, Credential, Node, Platform
from tests.provisioning import catalogue as test_catalogue

BMC_PASSWORD = "s3cret-Bmc-Pa55word"


@pytest.fixture
def state_dir(settings, tmp_path):
    settings.STATE_DIR = tmp_path / "state"
    settings.STATE_DIR.mkdir()
    return settings.STATE_DIR


@pytest.fixture
def probe():
    test_catalogue.PROBE_VARS.clear()
    yield test_catalogue.PROBE_VARS
    test_catalogue.PROBE_VARS.clear()


@pytest.fixture
def catalogue(probe, settings):
    # The engine's tests run their own playbooks with Ansible's defaults, not the product's ansible.cfg.
    settings.PLAYBOOKS_DIR = test_catalogue.PLAYBOOKS
    return test_catalogue.CATALOGUE


@pytest.fixture
def platform(db, settings):
    path = settings.BASE_DIR / "firmware" / "platforms" / "hgx-h100-8gpu.yaml"
    spec = yaml.safe_load(path.read_text())
    return Platform.objects.create(slug="hgx-h100-8gpu", name=spec["name"], file=path.name, digest="0" * 64,
                                   gpu_model=spec["gpu"]["model"], gpu_count=8, gpu_memory_mib=81559, spec=spec)


@pytest.fixture
def appliance(db, platform, tmp_path, settings, request):
    """Three simulated-style nodes (sysroot directories) with BMC passwords, each reached as the engine
    reaches every node: over SSH, at a server of its own (appliance.simulation.sshd), with become."""
    from appliance.simulation import sshd

    if "state_dir" in request.fixturenames:
        # A worker process started on this state directory finds the same servers and key.
        state = request.getfixturevalue("state_dir")
        settings.SIMULATION_DIR = state / "simulation"
        settings.KEYS_DIR = state / "keys"
        settings.KEYS_DIR.mkdir(mode=0o700, exist_ok=True)
    else:
        settings.SIMULATION_DIR = tmp_path / "simulation"
    appliance = Appliance.objects.create(name="lab", simulated=False)
    names, sysroots = [], []
    for index, (name, role) in enumerate([("gpu01", "gpu"), ("gpu02", "gpu"), ("mgmt01", "management")], start=1):
        sysroot = tmp_path / "nodes" / name
        (sysroot / "etc").mkdir(parents=True)
        (sysroot / "tmp").mkdir()
        names.append(name)
        sysroots.append(sysroot)
        node = Node.objects.create(appliance=appliance, name=name, role=role,
                                   platform=platform if role == "gpu" else None,
                                   management_address=f"192.168.50.{index}", sysroot=str(sysroot))
        credential, _ = Credential.objects.get_or_create(name="lab-bmc", defaults={
            "username": "admin", "secret": BMC_PASSWORD,
            "endpoints": [f"https://127.0.0.1:{18500 + n}" for n in (1, 2, 3)]})
        BMC.objects.create(node=node, url=f"https://127.0.0.1:{18500 + index}", credential=credential)
    sshd.prepare(names, sysroots)
    sshd.write_known_hosts()
    sshd.start_many(names)
    yield appliance
    for name in names:
        sshd.stop(name)
