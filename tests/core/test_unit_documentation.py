"""The systemd units point `Documentation=` at the documentation the portal serves (/docs/), not at a
README the wheel does not install."""

import io

import pytest
from django.core.management import call_command

UNITS = ("appliance-portal.service", "appliance-worker.service", "appliance-beat.service")


@pytest.mark.django_db
def test_units_name_the_portals_documentation(tmp_path):
    out = io.StringIO()
    call_command("install", "--production", "--dry-run", "--prefix", str(tmp_path / "p"), "--user", "root",
                 "--host", "appliance.example", "--bind", "0.0.0.0:8443", stdout=out)
    text = out.getvalue()
    for unit in UNITS:
        section = text.split(f"--- {tmp_path}/p/etc/systemd/system/{unit} (0644)\n", 1)[1].split("\n--- ", 1)[0]
        assert [line for line in section.splitlines() if line.startswith("Documentation=")] == [
            "Documentation=https://appliance.example:8443/docs/"], unit
    assert "README" not in text
