"""The README's main command on PostgreSQL, once: a fresh bootstrap of the demo appliance killed with
kill -9 during a stage, the rerun resumes and finishes (acceptance passed, every node ready), and
`audit verify --database` checks the log PostgreSQL holds.

test_bootstrap_demo.py runs the same on the embedded SQLite database (with the fault rounds); this
runs in the PostgreSQL pass, in a database of its own on the server DATABASE_URL names, so the
bootstrap's migrations, resume queries and the audit log's triggers meet the real server.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlunparse

import pytest
from django.conf import settings
from django.db import connection

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ROOT = Path(settings.BASE_DIR)


def server_url(database: str) -> str:
    db = connection.settings_dict
    credentials = (db.get("USER") or "postgres") + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    netloc = f"{credentials}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}"
    return urlunparse(("postgres", netloc, f"/{database}", "", "", ""))


@pytest.fixture
def postgres_site(tmp_path):
    """A fresh state directory and a fresh PostgreSQL database for manage.py; both go away afterwards."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: test_bootstrap_demo.py runs the bootstrap on SQLite")
    import psycopg

    name = f"appliance_bootstrap_{os.getpid()}"
    with psycopg.connect(server_url("postgres"), autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    state = tmp_path / "state"
    state.mkdir()
    env = {**os.environ, "APPLIANCE_STATE_DIR": str(state), "DATABASE_URL": server_url(name)}
    env.pop("DATABASE_MIGRATE_URL", None)
    yield state, env
    subprocess.run([sys.executable, "manage.py", "simulation", "stop"], cwd=ROOT, env=env, capture_output=True,
                   timeout=60, check=False)
    with psycopg.connect(server_url("postgres"), autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def manage(env, *args, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_bootstrap_killed_then_resumed_on_postgresql_and_the_log_verifies(postgres_site):
    state, env = postgres_site
    process = subprocess.Popen([sys.executable, "manage.py", "bootstrap", "--no-input"], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    deadline = time.monotonic() + 300
    for line in process.stdout:
        seen.append(line)
        if line.strip().startswith("firmware") and " ok " in line:
            break  # the os stage is now running
        assert time.monotonic() < deadline, "".join(seen)
    else:
        pytest.fail("the bootstrap ended before its firmware stage completed:\n" + "".join(seen[-40:]))
    time.sleep(1.5)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()

    rerun = manage(env, "bootstrap", "--no-input", timeout=900)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-2000:]
    assert "left running by a worker that died; marked failed" in rerun.stdout
    assert "already completed: firmware" in rerun.stdout
    assert "Acceptance: PASSED" in rerun.stdout

    script = ("import json; from django.db import connection; from appliance.inventory.models import Node; "
              "print(json.dumps([connection.vendor, sorted({n.state for n in Node.objects.all()}), "
              "Node.objects.count()]))")
    shell = manage(env, "shell", "-c", script, timeout=120)
    assert shell.returncode == 0, shell.stderr
    assert json.loads(shell.stdout.strip().splitlines()[-1]) == ["postgresql", ["ready"], 7]
    assert not (state / "appliance.sqlite3").exists() or (state / "appliance.sqlite3").stat().st_size == 0

    verify = manage(env, "audit", "verify", "--database", timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "tamper" not in (verify.stdout + verify.stderr).lower(), verify.stdout
