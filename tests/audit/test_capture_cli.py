"""Management commands: actor = the OS user, channel cli, secrets redacted, and every record the
command causes carries the same channel and request id."""

import io
import json
import os
import pwd

import pytest
from django.core.management import CommandError, ManagementUtility, call_command
from django.db import connections

from appliance.audit.capture.commands import redact_argv
from appliance.audit.models import AuditRecord
from appliance.core import context

pytestmark = pytest.mark.django_db


def command_records(name):
    return list(AuditRecord.objects.filter(event="cli.command", target_name=name).order_by("sequence"))


def test_command_is_recorded_as_the_os_user_on_the_cli_channel(tmp_path, settings):
    settings.KEYS_DIR = tmp_path
    password_file = tmp_path / "admin-password-input"
    password_file.write_text("Sufficiently-long-password-1\n")
    call_command("create_admin", "--username", "root-operator", "--password-file", str(password_file))

    [rec] = command_records("create_admin")
    assert rec.channel == "cli"
    assert rec.actor_username == context.os_user() and rec.actor_id is None
    assert rec.outcome == "success"
    assert rec.request_id.startswith("cli-")
    assert rec.details["command"] == "create_admin"
    assert rec.details["options"] == {"username": "root-operator", "password_file": "[redacted]"}
    assert str(password_file) not in json.dumps(rec.details)

    # What the command did is recorded on the same channel, as the same actor, under the same id.
    created = AuditRecord.objects.get(event="accounts.user.create", target_name="root-operator")
    assert created.channel == "cli" and created.actor_username == context.os_user()
    assert created.request_id == rec.request_id
    assert created.sequence < rec.sequence


def test_the_actor_is_the_account_of_the_real_uid_whatever_the_environment_says(tmp_path, settings, monkeypatch):
    from appliance.audit.export import export_bundle

    settings.KEYS_DIR = tmp_path
    # Whoever starts a process sets its environment: none of these may name the actor.
    for variable in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(variable, "admin\nforged")
    call_command("create_admin", "--username", "env-admin")
    [rec] = command_records("create_admin")
    account = pwd.getpwuid(os.getuid()).pw_name
    assert rec.actor_username == account
    assert AuditRecord.objects.get(event="accounts.user.create", target_name="env-admin").actor_username == account

    export_bundle(tmp_path / "bundle", "syslog")
    lines = (tmp_path / "bundle" / "records.log").read_bytes().splitlines()
    assert len(lines) == len((tmp_path / "bundle" / "records.jsonl").read_bytes().splitlines())


def test_command_line_arguments_are_kept_with_secret_values_redacted(tmp_path, settings, monkeypatch):
    settings.KEYS_DIR = tmp_path
    # run_from_argv closes every connection when it ends, which would end the test's transaction.
    monkeypatch.setattr(connections, "close_all", lambda: None)
    password_file = tmp_path / "pw"
    password_file.write_text("Sufficiently-long-password-2\n")
    ManagementUtility(["manage.py", "create_admin", "--skip-checks", "--username=from-argv",
                       f"--password-file={password_file}"]).execute()
    [rec] = command_records("create_admin")
    assert rec.details["argv"] == ["--skip-checks", "--username=from-argv", "--password-file=[redacted]"]
    assert str(password_file) not in json.dumps(rec.payload())


def test_failing_command_is_recorded_as_a_failure(tmp_path):
    missing = tmp_path / "does-not-exist"
    with pytest.raises(CommandError):
        call_command("create_admin", "--username", "x-admin", "--password-file", str(missing))
    [rec] = command_records("create_admin")
    assert rec.outcome == "failure"
    assert rec.reason.startswith("CommandError:")
    assert rec.channel == "cli"


def test_read_only_introspection_is_not_recorded():
    before = AuditRecord.objects.count()
    call_command("diffsettings", stdout=io.StringIO())
    assert AuditRecord.objects.count() == before


def test_command_called_inside_a_request_stays_on_that_channel(users, tmp_path, settings):
    settings.KEYS_DIR = tmp_path
    admin = users["administrator"]
    with context.acting_as(admin, channel="web", request_id="req-from-portal"):
        call_command("create_admin", "--username", "nested-admin")
    [rec] = command_records("create_admin")
    assert rec.channel == "web" and rec.actor_username == admin.username
    assert rec.request_id == "req-from-portal"


@pytest.mark.parametrize(("argv", "expected"), [
    (["--token", "abc", "pos"], ["--token", "[redacted]", "pos"]),
    (["--token=abc"], ["--token=[redacted]"]),
    (["--api-secret", "s3", "--name", "n"], ["--api-secret", "[redacted]", "--name", "n"]),
    (["--pass", "p"], ["--pass", "[redacted]"]),  # an abbreviation of --password
    (["-pTopSecret"], ["-p[redacted]"]),
    (["password=hunter2", "user=bob"], ["password=[redacted]", "user=bob"]),
    (["--username", "bob"], ["--username", "bob"]),
])
def test_redact_argv(argv, expected):
    assert redact_argv(argv, {"--password", "-p"}) == expected
