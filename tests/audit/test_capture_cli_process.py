"""The real command line, in a process of its own on a fresh state directory: the first migrate
runs before any audit table exists and is still recorded once the table is there; later commands
are recorded as the OS user, on the cli channel, with secrets redacted."""

import json
import os
import pwd
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def manage(state_dir: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    env["APPLIANCE_STATE_DIR"] = str(state_dir)
    # The environment names no actor: the OS account of the real uid does.
    env.update(LOGNAME="admin\nforged", USER="admin\nforged", LNAME="admin\nforged", USERNAME="admin\nforged")
    return subprocess.run([sys.executable, "manage.py", *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def os_user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def cli_records(state_dir: Path) -> list[dict]:
    with sqlite3.connect(state_dir / "appliance.sqlite3") as db:
        db.row_factory = sqlite3.Row
        rows = db.execute("SELECT * FROM audit_auditrecord WHERE event = 'cli.command' ORDER BY sequence").fetchall()
    return [dict(row) for row in rows]


def test_manage_py_commands_from_the_first_migrate_on(tmp_path):
    state = tmp_path / "state"
    before_tables = manage(state, "createcachetable")
    assert before_tables.returncode == 0, before_tables.stderr
    assert "not recorded: the audit log does not exist in this database yet" in before_tables.stderr

    migrated = manage(state, "migrate", "-v0")
    assert migrated.returncode == 0, migrated.stderr
    [migrate] = cli_records(state)
    assert migrate["target_name"] == "migrate" and migrate["outcome"] == "success"
    assert migrate["channel"] == "cli" and migrate["actor_username"] == os_user()
    assert json.loads(migrate["details"])["argv"] == ["-v0"]

    password_file = tmp_path / "admin-password-input"
    password_file.write_text("Sufficiently-long-password-3\n")
    created = manage(state, "create_admin", "--username", "ops-admin", "--password-file", str(password_file))
    assert created.returncode == 0, created.stderr
    command = cli_records(state)[-1]
    details = json.loads(command["details"])
    assert details["argv"] == ["--username", "ops-admin", "--password-file", "[redacted]"]
    assert str(password_file) not in command["details"]
    with sqlite3.connect(state / "appliance.sqlite3") as db:
        channel, actor, request_id = db.execute(
            "SELECT channel, actor_username, request_id FROM audit_auditrecord "
            "WHERE event = 'accounts.user.create' AND target_name = 'ops-admin'").fetchone()
    assert (channel, actor, request_id) == ("cli", os_user(), command["request_id"])

    failed = manage(state, "create_admin", "--username", "ops-admin-2", "--password-file", str(tmp_path / "missing"))
    assert failed.returncode != 0
    assert cli_records(state)[-1]["outcome"] == "failure"
