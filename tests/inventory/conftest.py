from pathlib import Path

import pytest

DEMO_PASSWORD = "Demo-bmc-Pw-7Kq2-plaintext"


@pytest.fixture
def site_env(settings, tmp_path):
    """A state directory holding what the simulation writes before the demo site is imported."""
    settings.STATE_DIR = tmp_path / "state"
    settings.SIMULATION_DIR = settings.STATE_DIR / "simulation"
    (settings.SIMULATION_DIR / "ca").mkdir(parents=True)
    (settings.SIMULATION_DIR / "bmc-password").write_text(DEMO_PASSWORD + "\n")
    (settings.SIMULATION_DIR / "ca" / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    return settings


@pytest.fixture
def demo_text(site_env) -> str:
    return Path(site_env.DEMO_SITE).read_text()
