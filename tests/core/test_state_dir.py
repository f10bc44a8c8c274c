"""The state directory holds the database (sessions, token digests), keys and logs: nobody but the
appliance's OS user reads it. Checked on a real `migrate` in a fresh process with a permissive umask."""

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOW_MODES = (
    "import os, stat; from django.conf import settings; from django.db import connection; "
    "connection.ensure_connection(); list(connection.cursor().execute('SELECT count(*) FROM django_session')); "
    "root = settings.STATE_DIR; "
    "[print(oct(stat.S_IMODE(os.stat(os.path.join(d, n)).st_mode)), os.path.relpath(os.path.join(d, n), root)) "
    " for d, dirs, files in os.walk(root) for n in dirs + files if not n.startswith(('simulation', 'static'))]"
)


def manage(state: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL", "APPLIANCE_"))}
    env["APPLIANCE_STATE_DIR"] = str(state)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, preexec_fn=lambda: os.umask(0o022))


def modes(output: str) -> dict[str, str]:
    return {line.split(" ", 1)[1]: line.split(" ", 1)[0] for line in output.splitlines() if line.startswith("0o")}


@pytest.mark.sqlite_only
def test_after_migrate_the_state_dir_is_private_and_the_database_too(tmp_path):
    state = tmp_path / "state"
    migrated = manage(state, "migrate", "--no-input")
    assert migrated.returncode == 0, migrated.stderr
    shown = manage(state, "shell", "-c", SHOW_MODES)
    assert shown.returncode == 0, shown.stderr
    found = modes(shown.stdout)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for name in ("appliance.sqlite3", "appliance.sqlite3-wal", "appliance.sqlite3-shm"):
        assert found.get(name) == "0o600", (name, found)
    for name in ("keys", "logs"):
        assert found.get(name) == "0o700", (name, found)
    assert found.get("keys/django-secret-key") == "0o600", found
    assert found.get("logs/appliance.log") == "0o600", found
    loose = {name: mode for name, mode in found.items() if int(mode, 8) & 0o077 and "/" not in name}
    assert loose == {}, loose


@pytest.mark.sqlite_only
def test_a_state_dir_made_before_the_rule_is_tightened(tmp_path):
    state = tmp_path / "state"
    (state / "logs").mkdir(parents=True, mode=0o755)
    os.chmod(state, 0o755)
    os.chmod(state / "logs", 0o755)
    database = state / "appliance.sqlite3"
    database.write_bytes(b"")
    os.chmod(database, 0o644)
    (state / "logs" / "appliance.log").write_text("old line\n")
    os.chmod(state / "logs" / "appliance.log", 0o644)
    result = manage(state, "check")
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / "logs").stat().st_mode) == 0o700
    assert stat.S_IMODE(database.stat().st_mode) == 0o600
    assert stat.S_IMODE((state / "logs" / "appliance.log").stat().st_mode) == 0o600


@pytest.mark.sqlite_only
def test_a_state_dir_others_can_enter_and_this_user_cannot_tighten_stops_the_process(tmp_path):
    """As an unprivileged account (the tests run as root; without root this fails, as it should), the
    helper settings.py calls on the state directory. Its source goes in on stdin, to the system's Python:
    the account may not be able to read the checkout or its virtualenv."""
    base = Path(tempfile.mkdtemp(prefix="appliance-foreign-"))
    try:
        os.chmod(base, 0o755)
        state = base / "state"
        state.mkdir(mode=0o755)
        os.chmod(state, 0o755)  # root's, open to all: the appliance's user may not change it
        program = (ROOT / "appliance" / "core" / "files.py").read_text() + f"\nprivate_directory({str(state)!r})\n"
        python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else os.path.realpath(sys.executable)
        result = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-"],
                                input=program, cwd=base, capture_output=True, text=True, timeout=60)
        assert result.returncode != 0
        assert (f"PermissionError: {state}: mode 755 lets other users in, and this OS user may not change it: "
                "make it 0700 and owned by the appliance's user") in result.stderr, result.stderr
    finally:
        shutil.rmtree(base)
