import ast
import functools
import json
import os
import re
import tempfile
from pathlib import Path

import pytest
from django.core.cache import cache
from django.test import Client

from appliance.core.roles import Role
from tests.wheel import appliance_wheel, installed_appliance  # noqa: F401 (session fixtures: the installed wheel)

PASSWORD = "correct-horse-battery-9"


@pytest.fixture
def make_user(db):
    from appliance.accounts.services import create_user

    def make(role: str = Role.VIEWER, username: str | None = None):
        return create_user(username or f"{role}-user", role, PASSWORD)

    return make


@pytest.fixture
def users(make_user):
    return {role: make_user(role) for role in Role.values}


@pytest.fixture
def client_for(users):
    """A logged-in Django test client for a role."""

    def make(role: str) -> Client:
        client = Client()
        client.force_login(users[role])
        return client

    return make


@pytest.fixture(autouse=True, scope="session")
def production_four_eyes_cooling_period():
    """The suite runs as a development appliance but tests the rule a production install keeps: a day's
    four-eyes cooling period (settings.py; development's default is none), in this process and in every
    `manage.py` subprocess. The demo story's test sets development's own default where it runs."""
    from datetime import timedelta

    from django.conf import settings

    os.environ.setdefault("APPLIANCE_FOUR_EYES_COOLING_SECONDS", str(24 * 3600))
    settings.FOUR_EYES_COOLING_PERIOD = timedelta(seconds=int(os.environ["APPLIANCE_FOUR_EYES_COOLING_SECONDS"]))


@pytest.fixture(autouse=True, scope="session")
def one_package_repository():
    """Every state directory of the session, `manage.py` subprocesses included, shares the session's
    package repository (README "Air-gapped installs"): the first simulated run builds it, once, under a
    lock; the others find it."""
    from django.conf import settings

    os.environ["APPLIANCE_REPOSITORY_DIR"] = str(settings.REPOSITORY_DIR)


@pytest.fixture(autouse=True, scope="session")
def audit_triggers_step_aside_for_flush():
    """pytest-django empties the database after a transactional test with a flush, which the audit
    log's append-only triggers refuse (they reject DELETE and TRUNCATE). Around that flush only, and
    only in the test suite, the triggers are taken away and put back, as a table owner could."""
    from django.db.backends.base.operations import BaseDatabaseOperations

    from appliance.audit import triggers

    original = BaseDatabaseOperations.execute_sql_flush

    def execute_sql_flush(self, sql_list):
        with triggers.suspended(self.connection):
            return original(self, sql_list)

    BaseDatabaseOperations.execute_sql_flush = execute_sql_flush
    yield
    BaseDatabaseOperations.execute_sql_flush = original


@pytest.fixture(autouse=True)
def background_work_ends_with_its_test():
    """Work a test handed to the in-process pool (a run started from a page, a task's own audit
    record) must land before the database is emptied for the next test."""
    yield
    from appliance.core import dispatch

    assert dispatch.drain(timeout=120), "background work still running 120 s after its test ended"


@pytest.fixture(autouse=True)
def audit_witness_of_the_test(settings, tmp_path):
    """Each test's audit log is a log of its own (emptied after it): so is the witness of its
    checkpoints, or the next test's `audit verify --database` would compare against another log."""
    settings.AUDIT_WITNESS_FILE = tmp_path / "audit-witness" / "witness.jsonl"


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """PBKDF2 at production strength makes the role x endpoint matrix minutes long; tests need no strength."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def pytest_configure(config):
    """As root, the simulated nodes log in as the simulation's service account, which must traverse the
    folders above a test's state directory: pytest's own root (/tmp/pytest-of-root, 0700, tightened again
    by every session that starts) would not let it. The session's temporary files go to a folder of its
    own instead, which the fixtures below open for traversal (never for listing)."""
    if os.geteuid() == 0 and config.option.basetemp is None and not hasattr(config, "workerinput"):
        config.option.basetemp = tempfile.mkdtemp(prefix="appliance-pytest-")


def traversable(path: Path) -> Path:
    """Let other users traverse `path` and its parents up to the system's temporary folder (o+x)."""
    top = Path(tempfile.gettempdir()).resolve()
    for directory in [Path(path).resolve(), *Path(path).resolve().parents]:
        if directory == top or top not in directory.parents:
            break
        os.chmod(directory, directory.stat().st_mode | 0o001)
    return Path(path)


@pytest.fixture(autouse=True)
def traversable_tmp_path(tmp_path):
    """A test's state directory under tmp_path is reachable by the simulated nodes' login account."""
    traversable(tmp_path)


# Tests here drive playbooks, simulated tools and emulators: the rows some of them write are their set-up,
# and the database backend changes nothing in what they prove, so the PostgreSQL pass does not repeat
# their minutes of work.
BACKEND_AGNOSTIC_DIRS = ("playbooks", "simulation", "workloads")
# What pytest-django gives a test that touches the database (django_db_setup: a module's or session's
# fixture that opens the database itself, as tests/playbooks/conftest.py does).
DATABASE_FIXTURES = frozenset({"db", "transactional_db", "live_server", "django_db_setup",
                               "django_db_reset_sequences", "django_db_serialized_rollback"})
# Scheduling by measurement: with `--dist loadfile` a file runs whole on one xdist worker, and the files are
# handed out in the order of the collection; the costliest go first, so that no worker is left with minutes of
# work while the other has none. Their cost is the last measurement, per pass: tests/durations.json, which
# `tests/run` rewrites at its end from what each pass measured (APPLIANCE_TEST_DURATIONS_OUT, written by
# pytest_sessionfinish below), so a file that grew is scheduled by what it costs now. A file never measured
# counts a quarter of a second a test.
DURATIONS_FILE = Path(os.environ.get("APPLIANCE_TEST_DURATIONS")
                      or Path(__file__).resolve().with_name("durations.json"))
UNMEASURED_SECONDS_PER_TEST = 0.25


def measured_durations(pass_name: str) -> dict[str, float]:
    """{"tests/...py": seconds} of the last measured run of this pass ("sqlite" or "postgresql")."""
    try:
        return json.loads(DURATIONS_FILE.read_text()).get(pass_name, {})
    except (OSError, ValueError):
        return {}


def uses_the_database(item) -> bool:
    """The django_db mark, or a fixture that pulls the database in, however indirectly."""
    return (item.get_closest_marker("django_db") is not None
            or not DATABASE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())))


# Where the code branches on the database vendor (or says PostgreSQL's name: its SQL, its COPY, its roles):
# a test file that imports one of these modules proves something on PostgreSQL that SQLite cannot. Found by
# reading the product's source at collection, so a new vendor branch brings its tests along.
_VENDOR_BRANCH = re.compile(r"\.vendor\b|postgresql")
# Fixtures whose tests reach the database from several connections at once (threads, a live server): the
# backends' locking and isolation differ there.
CONCURRENT_FIXTURES = frozenset({"transactional_db", "live_server"})


@functools.cache
def vendor_modules() -> frozenset[str]:
    package = Path(__file__).resolve().parents[1] / "appliance"
    found = set()
    for path in package.rglob("*.py"):
        if "migrations" in path.parts or path.name in ("settings.py", "host.py"):
            continue
        if _VENDOR_BRANCH.search(path.read_text()):
            found.add(".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__"))
    return frozenset(found)


@functools.cache
def imports_a_vendor_branch(path: str) -> bool:
    tree = ast.parse(Path(path).read_text())
    named = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            named.add(node.module)
            named.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
    return not named.isdisjoint(vendor_modules())


def _backend_independent_reason(item) -> str | None:
    """Why `item` proves nothing more on PostgreSQL than on SQLite, or None when it depends on the backend:
    marked postgres (the role matrices over a database, a PostgreSQL bootstrap), concurrent connections, or
    a file that imports a module with a vendor branch (the triggers, the chain's locking, the binary COPY
    paths, the ledger's SQL, the database roles)."""
    if item.get_closest_marker("sqlite_only"):
        return "sqlite_only (independent of DATABASE_URL, or runs manage.py on the embedded SQLite database)"
    if item.get_closest_marker("postgres"):
        return None
    if not uses_the_database(item):
        return "uses no database"
    marker = item.get_closest_marker("django_db")
    concurrent = (not CONCURRENT_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
                  or bool(marker and marker.kwargs.get("transaction")))
    if concurrent or imports_a_vendor_branch(str(item.path)):
        return None
    return "uses the database as SQLite does (no vendor branch imported, one connection)"


def _costliest_files_first(items, tests_root: Path, pass_name: str) -> list:
    """The items, file by file in descending order of their file's measured cost; the order inside a file
    is kept."""
    measured = measured_durations(pass_name)
    by_file: dict[str, list] = {}
    for item in items:
        by_file.setdefault(Path(str(item.path)).resolve().relative_to(tests_root).as_posix(), []).append(item)
    order = sorted(by_file, key=lambda name: -measured.get(
        f"tests/{name}", len(by_file[name]) * UNMEASURED_SECONDS_PER_TEST))
    return [item for name in order for item in by_file[name]]


def pytest_collection_modifyitems(config, items):
    """The PostgreSQL pass runs the tests that depend on the database backend: those that use the database
    (found from their marks and fixtures, so a new one is picked up without anyone marking it) and those
    marked postgres. The others ran in the SQLite pass; they are deselected here, and the summary says
    how many and why (pytest_terminal_summary). The costliest files go first (tests/durations.json)."""
    from django.db import connection

    tests_root = Path(__file__).resolve().parent
    for item in items:
        relative = Path(str(item.path)).resolve().relative_to(tests_root)
        if relative.parts and relative.parts[0] in BACKEND_AGNOSTIC_DIRS:
            item.add_marker(pytest.mark.sqlite_only)
    items[:] = _costliest_files_first(items, tests_root, pass_name())
    if connection.vendor != "postgresql":
        return
    kept, left_out, deselected = [], [], {}
    for item in items:
        reason = _backend_independent_reason(item)
        if reason is None:
            kept.append(item)
        else:
            left_out.append(item)
            deselected.setdefault(reason, []).append(item.nodeid)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
    summary = {reason: sorted(nodeids) for reason, nodeids in deselected.items()}
    config.stash[BACKEND_DESELECTED] = summary
    if hasattr(config, "workeroutput"):
        config.workeroutput["backend_deselected"] = summary


BACKEND_DESELECTED = pytest.StashKey[dict]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist's controller collects nothing itself: it takes the workers' account of what they deselected."""
    summary = getattr(node, "workeroutput", {}).get("backend_deselected")
    if summary is not None:
        node.config.stash[BACKEND_DESELECTED] = summary


def pass_name() -> str:
    from django.db import connection

    return "postgresql" if connection.vendor == "postgresql" else "sqlite"


# Seconds each test file took (set-up, call and tear-down of its tests, on whichever worker ran it): the
# session's summary lists the costliest, so that a slow suite says where its minutes went, and the next run
# orders its files by them (tests/durations.json).
_FILE_SECONDS: dict[str, float] = {}
SLOWEST_FILES_SHOWN = 25


def pytest_runtest_logreport(report):
    name = report.nodeid.split("::")[0]
    _FILE_SECONDS[name] = _FILE_SECONDS.get(name, 0.0) + (report.duration or 0.0)


def pytest_sessionfinish(session, exitstatus):
    """The controller (or a run without xdist) writes what it measured where tests/run asked."""
    out = os.environ.get("APPLIANCE_TEST_DURATIONS_OUT")
    if out and _FILE_SECONDS and not hasattr(session.config, "workerinput"):
        Path(out).write_text(json.dumps({pass_name(): {name: round(seconds, 1) for name, seconds
                                                       in sorted(_FILE_SECONDS.items())}}, indent=1) + "\n")


def pytest_terminal_summary(terminalreporter, config):
    if _FILE_SECONDS and not hasattr(config, "workerinput"):
        slowest = sorted(_FILE_SECONDS.items(), key=lambda item: -item[1])[:SLOWEST_FILES_SHOWN]
        terminalreporter.section("slowest test files (seconds, all workers together)")
        terminalreporter.write_line(f"{sum(_FILE_SECONDS.values()):.0f} s in {len(_FILE_SECONDS)} files; "
                                    + ", ".join(f"{name} {seconds:.0f}" for name, seconds in slowest))
    summary = config.stash.get(BACKEND_DESELECTED, None)
    if not summary:
        return
    total = sum(len(nodeids) for nodeids in summary.values())
    terminalreporter.section("deselected in the PostgreSQL pass (they ran in the SQLite pass)")
    terminalreporter.write_line(f"{total} tests proving nothing that depends on the database backend:")
    for reason, nodeids in sorted(summary.items()):
        files: dict[str, int] = {}
        for nodeid in nodeids:
            files[nodeid.split("::")[0]] = files.get(nodeid.split("::")[0], 0) + 1
        terminalreporter.write_line(f"  {len(nodeids)} {reason}: "
                                    + ", ".join(f"{name} ({count})" for name, count in sorted(files.items())))


@pytest.fixture(autouse=True)
def fresh_throttles(settings, request):
    """Rate-limit counters live in the cache; each test starts with none, in a cache of its own in this
    process's memory (the default, the database cache, needs the database, which most tests do not
    use; tests/core/test_production.py runs the database cache across processes)."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": request.node.nodeid}}
    yield
    cache.clear()


@pytest.fixture
def inventory(db):
    """Two HGX nodes, a storage node, pools and the rest (tests/sample_inventory.py)."""
    from tests.sample_inventory import build_sample_inventory

    return build_sample_inventory()


@pytest.fixture
def site_credentials(db):
    from appliance.inventory import credentials
    from tests.api.sites import SITE_BMC_ENDPOINTS, SITE_BMC_PASSWORD, SITE_CREDENTIAL

    return credentials.create(SITE_CREDENTIAL, username="admin", secret=SITE_BMC_PASSWORD,
                              endpoints=SITE_BMC_ENDPOINTS)
