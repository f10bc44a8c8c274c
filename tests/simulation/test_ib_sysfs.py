"""InfiniBand ports as the kernel shows them: the simulation writes /sys/class/infiniband in the kernel's
format under the node's sysroot and rewrites it when a fault takes a port down or trains it slower; the
ib_ports module reads exactly these files (no ibstat text)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from appliance.simulation import services

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "playbooks" / "collections" / "ansible_collections"
                       / "appliance" / "hgx" / "plugins" / "module_utils"))

import appliance_fabric_parsers as parsers  # noqa: E402

pytestmark = pytest.mark.django_db
GUID = "0x248a07d7d7002eff"  # the simulation's GUID of gpu01's mlx5_0 (Mellanox OUI 248a07)


def _raw(root: Path, device: str, name: str) -> str:
    return (root / "sys/class/infiniband" / device / "ports/1" / name).read_text()


def test_faults_change_the_ports_sysfs_shows(prepared):
    root = Path(prepared.sysroot)
    ports = parsers.read_infiniband_sysfs(str(root))
    assert sorted(ports) == [f"mlx5_{n}" for n in range(8)]
    assert ports["mlx5_0"] == {"node_guid": GUID, "ports": {1: {
        "state": "Active", "physical_state": "LinkUp", "rate_gbps": 400, "port_guid": GUID,
        "link_layer": "InfiniBand"}}}
    assert (root / "sys/class/infiniband/mlx5_0/node_guid").read_text() == "248a:07d7:d700:2eff\n"
    assert _raw(root, "mlx5_0", "gids/0") == "fe80:0000:0000:0000:248a:07d7:d700:2eff\n"

    services.inject_fault(prepared, "port_down", device="mlx5_3")
    services.inject_fault(prepared, "port_rate", device="mlx5_1", rate_gbps=200)
    assert (_raw(root, "mlx5_3", "state"), _raw(root, "mlx5_3", "phys_state")) == ("1: DOWN\n", "2: Polling\n")
    assert _raw(root, "mlx5_1", "rate") == "200 Gb/sec (4X HDR)\n"
    ports = parsers.read_infiniband_sysfs(str(root))
    assert (ports["mlx5_3"]["ports"][1]["state"], ports["mlx5_3"]["ports"][1]["physical_state"]) == ("Down", "Polling")
    assert ports["mlx5_1"]["ports"][1]["rate_gbps"] == 200
    assert ports["mlx5_2"]["ports"][1]["rate_gbps"] == 400

    services.clear_faults(prepared)
    assert _raw(root, "mlx5_3", "state") == "4: ACTIVE\n" and _raw(root, "mlx5_1", "rate") == "400 Gb/sec (4X NDR)\n"


@pytest.mark.slow
def test_ib_ports_module_names_the_faults_it_reads_in_sysfs(prepared):
    """The module itself, as the fabric stage runs it."""
    root = Path(prepared.sysroot)
    services.inject_fault(prepared, "port_down", device="mlx5_3")
    services.inject_fault(prepared, "port_rate", device="mlx5_1", rate_gbps=200)
    expected = [{"device": f"mlx5_{n}", "port": 1} for n in range(8)]
    result = subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), "localhost", "-c", "local", "-o", "-m", "appliance.hgx.ib_ports",
         "-a", json.dumps({"node": "gpu01", "sysroot": str(root), "expected_ports": expected, "rate_gbps": 400})],
        capture_output=True, text=True, timeout=120, cwd=settings.BASE_DIR,
        env={**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(settings.BASE_DIR / "playbooks" / "collections"),
             "ANSIBLE_PYTHON_INTERPRETER": sys.executable, "ANSIBLE_LOCALHOST_WARNING": "False"})
    assert result.returncode == 2, result.stdout + result.stderr
    problems = json.loads(result.stdout.split("=>", 1)[1])["problems"]
    assert problems == ["gpu01 mlx5_1/1: rate expected 400 Gb/s, measured 200 Gb/s",
                        "gpu01 mlx5_3/1: state expected Active, measured Down",
                        "gpu01 mlx5_3/1: physical state expected LinkUp, measured Polling",
                        "gpu01 mlx5_3/1: rate expected 400 Gb/s, measured 10 Gb/s"]
