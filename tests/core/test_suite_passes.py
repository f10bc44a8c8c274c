"""What each pass of `bash tests/run` runs (tests/conftest.py): the PostgreSQL pass keeps the tests that depend
on the backend (marked postgres, concurrent connections, or a file importing a module with a vendor branch);
it deselects the sqlite_only ones, those that use no database and those that use it as SQLite does, and says
so in its summary. Both hand out the costliest files first, by the last measurement."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def collect_on_postgresql(tmp_path, *files) -> subprocess.CompletedProcess:
    """`pytest --collect-only` as the PostgreSQL pass runs it (collecting connects to no server), with a last
    measurement of its own: the PostgreSQL bootstrap measured, the other files not."""
    measured = tmp_path / "durations.json"
    measured.write_text(json.dumps({"postgresql": {"tests/provisioning/test_bootstrap_postgresql.py": 850.0}}))
    env = {**os.environ, "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/appliance",
           "APPLIANCE_STATE_DIR": str(tmp_path / "state"), "APPLIANCE_TEST_DURATIONS": str(measured)}
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "--basetemp", str(tmp_path / "basetemp"), *files],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_the_postgresql_pass_runs_what_depends_on_the_backend_costliest_first_and_says_what_it_left_out(tmp_path):
    result = collect_on_postgresql(
        tmp_path,
        "tests/provisioning/test_events_no_log.py",  # imports provisioning.events, which branches on the vendor
        "tests/accounts/test_sessions.py",  # the django_db mark, no vendor branch imported
        "tests/audit/test_merkle.py",  # no database
        "tests/inventory/test_health_api.py",  # the database through a fixture, no vendor branch imported
        "tests/core/test_state_dir.py",  # sqlite_only
        "tests/provisioning/test_bootstrap_postgresql.py",  # postgres, a database of its own, no fixture
        "tests/audit/test_concurrency.py",  # concurrent connections (and marked postgres)
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    collected = [line for line in result.stdout.splitlines() if line.startswith("tests/")]
    assert collected == [
        # Listed late, run first: its file is the costliest by the last measurement; the others (never measured,
        # one test each) keep the order they were named in.
        "tests/provisioning/test_bootstrap_postgresql.py::"
        "test_bootstrap_killed_then_resumed_on_postgresql_and_the_log_verifies",
        "tests/provisioning/test_events_no_log.py::test_a_censored_result_is_changed_when_ansible_says_so",
        "tests/audit/test_concurrency.py::test_eight_concurrent_writers_keep_the_chain_gapless_and_linear",
    ], result.stdout
    assert "3/25 tests collected (22 deselected)" in result.stdout, result.stdout
    assert "22 tests proving nothing that depends on the database backend:" in result.stdout
    assert ("  3 sqlite_only (independent of DATABASE_URL, or runs manage.py on the embedded SQLite database): "
            "tests/core/test_state_dir.py (3)") in result.stdout
    assert "  13 uses no database: tests/audit/test_merkle.py (13)" in result.stdout
    assert ("  6 uses the database as SQLite does (no vendor branch imported, one connection): "
            "tests/accounts/test_sessions.py (3), tests/inventory/test_health_api.py (3)") in result.stdout


def collect_in_order(tmp_path, durations: dict, *files) -> list[str]:
    """The files in the order the SQLite pass hands them out, with `durations` as the last measurement."""
    measured = tmp_path / "durations.json"
    measured.write_text(json.dumps(durations))
    env = {**os.environ, "APPLIANCE_TEST_DURATIONS": str(measured), "APPLIANCE_STATE_DIR": str(tmp_path / "state")}
    env.pop("DATABASE_URL", None)
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             "--basetemp", str(tmp_path / "basetemp"), *files],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return list(dict.fromkeys(line.split("::")[0] for line in result.stdout.splitlines() if line.startswith("tests/")))


def test_files_are_handed_out_costliest_first_by_the_last_measurement(tmp_path):
    files = ("tests/audit/test_merkle.py", "tests/core/test_state_dir.py", "tests/accounts/test_sessions.py")
    assert collect_in_order(tmp_path, {"sqlite": {"tests/core/test_state_dir.py": 40.0,
                                                  "tests/accounts/test_sessions.py": 7.5}}, *files) == [
        "tests/core/test_state_dir.py", "tests/accounts/test_sessions.py", "tests/audit/test_merkle.py"]
    # A file measured slower is handed out earlier; one never measured counts a quarter second a test
    # (test_merkle.py's 13 tests: 3.25 s), and the PostgreSQL pass's figures do not order the SQLite pass.
    assert collect_in_order(tmp_path, {"sqlite": {"tests/accounts/test_sessions.py": 90.0,
                                                  "tests/core/test_state_dir.py": 1.0},
                                       "postgresql": {"tests/core/test_state_dir.py": 500.0}}, *files) == [
        "tests/accounts/test_sessions.py", "tests/audit/test_merkle.py", "tests/core/test_state_dir.py"]
