"""The portal's credentials page: Administrators create, change, rebind and delete credentials; nobody
else sees it; no page shows a secret."""

import pytest

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.inventory.models import Credential
from tests.sample_inventory import BMC_PASSWORD

pytestmark = pytest.mark.django_db

NEW = {"name": "rack9-bmc", "username": "root", "secret": "Rack9-Portal-Secret-5",
       "endpoints": "https://10.9.0.1\n10.9.0.2:8443\n", "description": "rack 9", "ca_file": ""}


def test_an_administrator_creates_changes_and_deletes_a_credential(client_for, inventory):
    admin = client_for(Role.ADMINISTRATOR)
    page = admin.get("/inventory/credentials/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-credential="sample-bmc"' in html and BMC_PASSWORD not in html
    assert '<a href="/inventory/nodes/gpu-01/">gpu-01</a>' in html

    records = AuditRecord.objects.count()
    assert admin.post("/inventory/credentials/", NEW).status_code == 302
    credential = Credential.objects.get(name="rack9-bmc")
    assert (credential.secret, credential.endpoints) == ("Rack9-Portal-Secret-5",
                                                         ["https://10.9.0.1:443", "https://10.9.0.2:8443"])

    # A change that leaves the secret empty keeps it; the endpoints are replaced.
    response = admin.post("/inventory/credentials/rack9-bmc/", {**NEW, "secret": "", "endpoints": "https://10.9.0.3"})
    assert response.status_code == 302
    credential.refresh_from_db()
    assert (credential.secret, credential.endpoints) == ("Rack9-Portal-Secret-5", ["https://10.9.0.3:443"])

    html = admin.get("/inventory/credentials/").content.decode()
    assert "Rack9-Portal-Secret-5" not in html and "https://10.9.0.3:443" in html

    assert admin.post("/inventory/credentials/rack9-bmc/", {"delete": "1"}).status_code == 302
    assert not Credential.objects.filter(name="rack9-bmc").exists()
    events = AuditRecord.objects.filter(sequence__gt=records, event__startswith="inventory.credential.")
    assert [(e.event, e.channel, e.actor_username) for e in events] == [
        ("inventory.credential.create", "web", "administrator-user"),
        ("inventory.credential.update", "web", "administrator-user"),
        ("inventory.credential.delete", "web", "administrator-user")]
    assert "Rack9-Portal-Secret-5" not in str([e.details for e in events])


def test_bad_input_is_named_and_changes_nothing(client_for, inventory):
    admin = client_for(Role.ADMINISTRATOR)
    response = admin.post("/inventory/credentials/", {**NEW, "endpoints": "ftp://10.9.0.1"})
    assert response.status_code == 400
    assert "a BMC is reached over https" in response.content.decode()
    assert not Credential.objects.filter(name="rack9-bmc").exists()

    response = admin.post("/inventory/credentials/sample-bmc/", {"delete": "1"}, follow=True)
    assert "sample-bmc: credential sample-bmc is used by the BMC of gpu-01, gpu-02" in response.content.decode()
    assert Credential.objects.filter(name="sample-bmc").exists()


@pytest.mark.parametrize("role", [Role.OPERATOR, Role.ML_ENGINEER, Role.AUDITOR, Role.VIEWER])
def test_no_other_role_sees_or_changes_credentials(client_for, inventory, role):
    client = client_for(role)
    assert client.get("/inventory/credentials/").status_code == 403
    assert client.post("/inventory/credentials/", NEW).status_code == 403
    assert client.post("/inventory/credentials/sample-bmc/", {"delete": "1"}).status_code == 403
    assert not Credential.objects.filter(name="rack9-bmc").exists() and Credential.objects.filter(
        name="sample-bmc").exists()
    assert "/inventory/credentials/" not in client.get("/").content.decode()
