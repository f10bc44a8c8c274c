import pytest
from django.test import Client
from django.urls import reverse

from tests.conftest import PASSWORD

DEMO_BMC_PASSWORD = "Demo-bmc-Pw-7Kq2-plaintext"


@pytest.fixture(autouse=True)
def audit_settings(settings, tmp_path):
    """A signing key of the test's own, and checkpoints every few records so ranges hold several."""
    settings.AUDIT_SIGNING_KEY_FILE = tmp_path / "keys" / "audit-signing.key"
    settings.AUDIT_CHECKPOINT_EVERY_RECORDS = 5
    settings.AUDIT_CHECKPOINT_EVERY_SECONDS = 3600
    return settings


@pytest.fixture
def real_session(db, make_user, settings, tmp_path):
    """A short working session through the real entry points: logins (one failed), a site import,
    inventory edits, a denied request, a logout."""
    from appliance.inventory.models import Appliance
    from appliance.inventory.services import import_site
    from appliance.simulation.services import demo_site_text, ensure_demo_credential

    admin = make_user("administrator", "alice")
    make_user("viewer", "victor")
    browser = Client(REMOTE_ADDR="192.0.2.10", HTTP_USER_AGENT="Mozilla/5.0 (audit test)")
    browser.post(reverse("accounts:login"), {"username": "alice", "password": "wrong-password"})
    browser.post(reverse("accounts:login"), {"username": "alice", "password": PASSWORD})

    settings.STATE_DIR = tmp_path / "state"
    settings.SIMULATION_DIR = settings.STATE_DIR / "simulation"
    (settings.SIMULATION_DIR / "ca").mkdir(parents=True)
    (settings.SIMULATION_DIR / "bmc-password").write_text(DEMO_BMC_PASSWORD + "\n")
    ensure_demo_credential()
    import_site(demo_site_text(), "demo.yml")

    appliance = Appliance.objects.first()
    appliance.description = 'Rack "A" | row=3 \\ east ]'
    appliance.save()

    viewer = Client(REMOTE_ADDR="192.0.2.11")
    viewer.post(reverse("accounts:login"), {"username": "victor", "password": PASSWORD})
    viewer.post(reverse("accounts:user-create"), {"username": "mallory", "role": "administrator"})
    browser.post(reverse("accounts:logout"))
    return admin
