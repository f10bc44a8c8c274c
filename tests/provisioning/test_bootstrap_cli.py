"""`manage.py bootstrap` as an operator runs it, in its own process:

- two simulated appliances bootstrapped at the same time, in two state directories on one machine, both
  succeed: each has its own BMC ports, its inventory names them and its emulators answer on them;
- a wrong stage name is refused before anything is migrated, created or imported;
- a firmware-only bootstrap is titled by its stage, not "every stage";
- --no-color and NO_COLOR leave no colour code in a terminal; a pipe gets no escape code at all;
- in a pipe, the acceptance result is the failed checks, whole, a summary per node and where the full
  report is.

They drive manage.py on the embedded SQLite database whatever DATABASE_URL says, so they run once, in
the SQLite pass.
"""

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from django.conf import settings

pytestmark = [pytest.mark.slow, pytest.mark.sqlite_only]

ROOT = Path(settings.BASE_DIR)
STAGES = "firmware, os, gpu, fabric, gpudirect, storage, workloads, partitioning, monitoring, acceptance"
SGR = re.compile(r"\x1b\[[0-9;]*m")  # colour and style codes
NODES = {"gpu01", "gpu02", "gpu03", "gpu04", "stor01", "stor02", "mgmt01"}


def environment(state_dir: Path, **extra) -> dict:
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS")}
    env.update(APPLIANCE_STATE_DIR=str(state_dir), TERM="xterm-256color", **extra)
    return env


def manage(state_dir: Path, *args, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=environment(state_dir),
                          capture_output=True, text=True, timeout=timeout)


def in_terminal(state_dir: Path, *args, timeout=300, **extra) -> tuple[int, str]:
    """manage.py with a terminal as its stdin, stdout and stderr; (exit status, everything it wrote)."""
    primary, secondary = pty.openpty()
    process = subprocess.Popen([sys.executable, "manage.py", *args], cwd=ROOT, env=environment(state_dir, **extra),
                               stdin=secondary, stdout=secondary, stderr=secondary, start_new_session=True)
    os.close(secondary)
    output = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 1)
            if not ready:
                continue
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the terminal closed: the process ended
                break
            if not chunk:
                break
            output += chunk
        status = process.wait(timeout=max(1, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
        os.close(primary)
    return status, output.decode(errors="replace")


def shell(state_dir: Path, script: str):
    result = manage(state_dir, "shell", "-c", script)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def bmc_urls(state_dir: Path) -> dict:
    return shell(state_dir, "import json; from appliance.inventory.models import BMC; "
                            "print(json.dumps({b.node.name: b.url for b in BMC.objects.select_related('node')}))")


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """Two demo appliances bootstrapped at the same time (firmware only), one in a pipe, the other in a
    terminal with --no-color."""
    from tests.conftest import traversable  # the simulated nodes' login account reaches the sysroots

    first = traversable(tmp_path_factory.mktemp("first")) / "state"
    second = traversable(tmp_path_factory.mktemp("second")) / "state"
    first.mkdir()
    second.mkdir()
    log = first.parent / "bootstrap.out"
    with open(log, "w") as out:
        piped = subprocess.Popen([sys.executable, "manage.py", "bootstrap", "--no-input", "--only", "firmware"],
                                 cwd=ROOT, env=environment(first), stdout=out, stderr=subprocess.STDOUT, text=True)
        try:
            terminal_status, terminal_output = in_terminal(second, "bootstrap", "--no-input", "--only", "firmware",
                                                           "--no-color")
            piped_status = piped.wait(timeout=300)
        finally:
            if piped.poll() is None:
                piped.kill()
    yield {"first": first, "second": second, "piped": (piped_status, log.read_text()),
           "terminal": (terminal_status, terminal_output)}
    for state in (first, second):
        manage(state, "simulation", "stop", timeout=240)


def test_two_simulated_appliances_bootstrap_at_once_on_one_machine(two):
    status, output = two["piped"]
    assert status == 0, output[-3000:]
    status, output = two["terminal"]
    assert status == 0, output[-3000:]

    allocations = {}
    for key in ("first", "second"):
        state = two[key]
        allocation = json.loads((state / "simulation" / "ports.json").read_text())["bmc"]
        assert set(allocation) == NODES
        assert bmc_urls(state) == {name: f"https://127.0.0.1:{port}" for name, port in allocation.items()}
        allocations[key] = allocation
    assert not set(allocations["first"].values()) & set(allocations["second"].values())

    for key in ("first", "second"):
        state = two[key]
        password = (state / "simulation" / "bmc-password").read_text().strip()
        ca = str(state / "simulation" / "ca" / "ca.pem")
        for name, port in allocations[key].items():
            answer = requests.get(f"https://127.0.0.1:{port}/redfish/v1/Systems", auth=("admin", password),
                                  verify=ca, timeout=10)
            assert answer.status_code == 200, (key, name, answer.status_code)
    # Each appliance's emulators are its own: the other's password is refused.
    other = (two["second"] / "simulation" / "bmc-password").read_text().strip()
    refused = requests.get(f"https://127.0.0.1:{allocations['first']['gpu01']}/redfish/v1/Systems",
                           auth=("admin", other), verify=str(two["first"] / "simulation" / "ca" / "ca.pem"), timeout=10)
    assert refused.status_code == 401


def test_a_firmware_only_bootstrap_is_titled_by_its_stage(two):
    _, output = two["piped"]
    assert "run #1 (bootstrap, stage firmware): stages firmware on appliance demo." in output
    assert "run #1 (bootstrap, stage firmware): succeeded · " in output
    assert "every stage" not in output


def test_no_color_and_NO_COLOR_leave_no_colour_code(two):
    _, output = two["piped"]
    assert "\x1b" not in output, "a pipe gets plain text"
    _, output = two["terminal"]
    assert "Acceptance" not in output and "firmware    ok · 7 hosts" in output
    assert SGR.findall(output) == [], "--no-color in a terminal"

    # The same run again (nothing left to change) with NO_COLOR, then without.
    status, output = in_terminal(two["second"], "bootstrap", "--no-input", "--only", "firmware", NO_COLOR="1")
    assert status == 0, output[-3000:]
    assert "firmware    ok · 7 hosts" in output
    assert SGR.findall(output) == [], "NO_COLOR in a terminal"
    status, output = in_terminal(two["second"], "bootstrap", "--no-input", "--only", "firmware")
    assert status == 0, output[-3000:]
    assert len(SGR.findall(output)) > 0, "a terminal gets colour unless asked not to"


def test_the_acceptance_result_in_a_pipe_is_failures_a_summary_per_node_and_the_report_address(two):
    state = two["first"]
    result = manage(state, "bootstrap", "--no-input", "--only", "acceptance")
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    output = result.stdout
    checks = shell(state, "import json; from appliance.provisioning.models import AcceptanceCheck as C; "
                          "print(json.dumps([[c.host, c.name, c.passed] for c in C.objects.all()]))")
    failed = [(host, name) for host, name, passed in checks if not passed]
    assert failed and len(failed) < len(checks)

    assert "…" not in output
    lines = output.splitlines()
    fail_lines = [line for line in lines if line.startswith("  FAIL  ")]
    assert len(fail_lines) == len(failed)
    for host, name in failed:
        assert any(line.startswith(f"  FAIL  {host}  {name}  expected ") for line in fail_lines), (host, name)
    assert not any(line.startswith("  pass  ") for line in lines), "passed checks are not listed"
    # The names the issue could not tell apart, each whole on its own line.
    for name in ("service.nvidia-fabricmanager", "service.nvidia-dcgm"):
        assert sum(line.startswith(f"  FAIL  gpu01  {name}  expected active, measured inactive") for line in lines) == 1
    # Its failure is printed once, in the list: the stage's line points to it.
    assert output.count("systemctl is-active nvidia-fabricmanager: inactive") == 4  # gpu01-gpu04
    assert "    the failed checks are listed below" in lines

    for host in NODES:
        passed = sum(1 for h, _, ok in checks if h == host and ok)
        failing = sum(1 for h, _, ok in checks if h == host and not ok)
        assert re.search(rf"^  {host} +{passed} +{failing}$", output, re.MULTILINE), host
    assert re.search(rf"^Acceptance: FAILED \({len(checks) - len(failed)}/{len(checks)} checks passed\)$", output,
                     re.MULTILINE)
    # The demo portal of this state directory, whose port the bootstrap allocated and kept in ports.json.
    port = json.loads((state / "simulation" / "ports.json").read_text())["portal"]["portal"]
    assert port != 8000
    assert (f"Full report: http://127.0.0.1:{port}/provisioning/acceptance/?appliance=demo "
            f"(this run: http://127.0.0.1:{port}/provisioning/runs/2/); --all prints every check here") in lines
    assert "failed: stage acceptance, host " in result.stderr


def test_NO_COLOR_also_takes_the_colour_off_the_error_line(tmp_path):
    status, output = in_terminal(tmp_path, "bootstrap", "--no-input", "--from", "nosuch", timeout=120, NO_COLOR="1")
    assert status == 2 and f"CommandError: --from: unknown stage 'nosuch' (stages: {STAGES})" in output
    assert SGR.findall(output) == []
    status, output = in_terminal(tmp_path, "bootstrap", "--no-input", "--from", "nosuch", timeout=120)
    assert status == 2 and len(SGR.findall(output)) > 0


@pytest.mark.parametrize("args,error", [
    (["--from", "nosuch"], f"--from: unknown stage 'nosuch' (stages: {STAGES})"),
    (["--only", "firmware,nosuch"], f"--only: unknown stage 'nosuch' (stages: {STAGES})"),
    (["--only", "gpu", "--from", "acceptance"],
     f"--only gpu --from acceptance: no stage left to run (stages in order: {STAGES})"),
    (["--site", "/nonexistent/site.yml"], "--site /nonexistent/site.yml: No such file or directory"),
])
def test_a_wrong_argument_is_refused_before_anything_is_created(tmp_path, args, error):
    state = tmp_path / "state"
    state.mkdir()
    result = manage(state, "bootstrap", "--no-input", *args, timeout=120)
    assert result.returncode == 2
    assert f"CommandError: {error}\n" in result.stderr
    assert result.stdout == ""
    # The settings make the database file 0600 before any connection; nothing is written into it.
    assert (state / "appliance.sqlite3").stat().st_size == 0, "nothing migrated"
    assert not (state / "keys" / "admin-password").exists(), "no administrator"
    assert not (state / "simulation").exists(), "no simulation, no credential, no site"
