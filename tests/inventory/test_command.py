"""`manage.py site validate|import`: output and exit codes."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from appliance.audit.models import AuditRecord
from appliance.inventory.models import Node

pytestmark = pytest.mark.django_db


def run(*args) -> tuple[str, str]:
    from io import StringIO

    out, err = StringIO(), StringIO()
    call_command("site", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_validate_prints_a_summary(site_env):
    out, _ = run("validate", str(site_env.DEMO_SITE))
    assert out.strip() == (f"{site_env.DEMO_SITE}: valid (7 nodes, 2 networks, 2 filesystems, 2 pools, 1 switch)")
    assert not Node.objects.exists()


def test_validate_of_a_broken_file_lists_every_error_and_fails(site_env, tmp_path):
    broken = tmp_path / "site.yml"
    broken.write_text(Path(site_env.DEMO_SITE).read_text()
                      .replace('url: "https://127.0.0.1:18443"', "url: 127.0.0.1:18443")
                      .replace("nodes: [gpu04]", "nodes: [gpu04, gpu07]"))
    records = AuditRecord.objects.count()
    with pytest.raises(CommandError) as caught:
        run("validate", str(broken))
    assert caught.value.returncode == 1
    assert str(caught.value) == f"{broken}: 2 errors, nothing written"
    # The audit log keeps that the command ran (cli.command), and nothing else was written.
    assert not AuditRecord.objects.filter(sequence__gt=records).exclude(event="cli.command").exists()
    assert not Node.objects.exists()


def test_import_prints_changes_then_no_changes(site_env, tmp_path):
    site = tmp_path / "site.yml"
    site.write_text(Path(site_env.DEMO_SITE).read_text())
    out, _ = run("import", str(site))
    lines = out.splitlines()
    assert "create node gpu01" in lines and "create bmc gpu01" in lines and "create gpu gpu01/gpu7" in lines
    assert lines[-1].startswith(f"{site}: {len(lines) - 1} changes ({len(lines) - 1} created, 0 updated, 0 deleted)")
    out, _ = run("import", str(site))
    assert out.strip() == f"{site}: no changes"

    site.write_text(site.read_text().replace("replicas: 4", "replicas: 8"))
    out, _ = run("import", "--dry-run", str(site))
    assert out.splitlines() == [
        "update pool inference: settings {'time_slicing': {'replicas': 4}} -> {'time_slicing': {'replicas': 8}}",
        f"{site}: 1 changes (0 created, 1 updated, 0 deleted)",
        "dry run: nothing written",
    ]
    out, _ = run("import", str(site))
    assert out.splitlines()[0].startswith("update pool inference")
    record = AuditRecord.objects.filter(event="inventory.site.import").latest("sequence")
    assert record.details["changes"] == {"create": 0, "update": 1, "delete": 0}


def test_missing_file_is_an_error(site_env, tmp_path):
    with pytest.raises(CommandError, match="No such file"):
        run("validate", str(tmp_path / "absent.yml"))


def test_exit_status_of_the_real_command(site_env, tmp_path):
    broken = tmp_path / "site.yml"
    broken.write_text("appliance: {name: lab}\nnodes:\n  - name: gpu01\n    role: gpu\n")
    env = {**os.environ, "APPLIANCE_STATE_DIR": str(site_env.STATE_DIR)}
    env.pop("DATABASE_URL", None)
    manage = Path(__file__).resolve().parents[2] / "manage.py"
    done = subprocess.run([sys.executable, str(manage), "site", "validate", str(broken)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1, done.stderr
    assert f"{broken}:3: nodes[0].platform: required field missing" in done.stderr
    assert f"{broken}:3: nodes[0].bmc: required field missing" in done.stderr
    # The demo site names the credential demo-bmc: an Administrator creates it first (the secret on stdin).
    endpoints = [f"--endpoint=https://127.0.0.1:{port}" for port in range(18441, 18448)]
    for command, stdin in ((["migrate", "-v0"], ""),
                           (["credential", "create", "demo-bmc", "--username", "admin", "--secret-file", "-", *endpoints],
                            "Cli-secret-9\n")):
        done = subprocess.run([sys.executable, str(manage), *command], input=stdin,
                              capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
    assert "Cli-secret-9" not in done.stdout + done.stderr
    done = subprocess.run([sys.executable, str(manage), "site", "validate", str(site_env.DEMO_SITE)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{site_env.DEMO_SITE}: valid (7 nodes")
