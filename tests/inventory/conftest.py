import json
from pathlib import Path

import pytest

DEMO_PASSWORD = "Demo-bmc-Pw-7Kq2-plaintext"
LAB_PASSWORD = "Lab-bmc-Pw-3xQ9-plaintext"
DEMO_BMC_PORTS = {"gpu01": 18441, "gpu02": 18442, "gpu03": 18443, "gpu04": 18444, "stor01": 18445, "stor02": 18446,
                  "mgmt01": 18447}
LAB_ENDPOINTS = ["https://10.0.0.1", "https://10.0.0.2", "https://10.0.0.4", "https://bmc-n1"]


@pytest.fixture
def site_env(settings, tmp_path, db):
    """A state directory holding what the simulation writes before the demo site is imported, and the
    credentials the test sites name: `demo-bmc` (made as the bootstrap makes it) and `lab-bmc`."""
    from appliance.inventory import credentials
    from appliance.simulation.services import ensure_demo_credential

    settings.STATE_DIR = tmp_path / "state"
    settings.SIMULATION_DIR = settings.STATE_DIR / "simulation"
    (settings.SIMULATION_DIR / "ca").mkdir(parents=True)
    (settings.SIMULATION_DIR / "bmc-password").write_text(DEMO_PASSWORD + "\n")
    # The ports the simulation allocated to the demo's emulators in this state directory: here those
    # demo.yml names, so that the tests import and edit the file as written.
    (settings.SIMULATION_DIR / "ports.json").write_text(json.dumps({"bmc": DEMO_BMC_PORTS}))
    ensure_demo_credential()
    credentials.create("lab-bmc", username="root", secret=LAB_PASSWORD, endpoints=LAB_ENDPOINTS)
    return settings


@pytest.fixture
def demo_text(site_env) -> str:
    return Path(site_env.DEMO_SITE).read_text()
