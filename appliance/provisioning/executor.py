"""Runs one stage's playbook through ansible-runner, with a private data directory per stage run.

<STATE_DIR>/runs/<run>/<order>-<stage>/ holds the generated inventory, the extra variables, the
masked copy of the secrets, and ansible-runner's artifacts (stdout, command). The real secrets live
in a 0600 vars file passed with `-e @file` and removed as soon as ansible-playbook has ended.

Ansible runs with Mitogen's `mitogen_linear` strategy: on the local connection every host's modules
run in one persistent interpreter instead of one new Python per task, which is what makes the
simulated bootstrap fast (FIELD-NOTES: 70 s -> 10.5 s for 8 hosts x 21 tasks). Without Mitogen the
stock `linear` strategy is used and the stage output says so.
"""

import json
import os
import shutil
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import ansible_runner
from django.conf import settings

from appliance.core.files import write_private
from appliance.core.secrets import MASK

from .events import EventIngestor, IngestResult, Scrubber
from .facts import FactsSink
from .models import StageRun
from .playbook_vars import PlaybookInput
from .processes import is_ansible, kill_tree


@dataclass
class StageExecution:
    status: str  # ansible-runner's: successful, failed, canceled, timeout, error
    rc: int | None
    ingest: IngestResult
    strategy: str
    notice: str
    stdout_tail: str


def strategy() -> tuple[str, str | None, str]:
    """(strategy name, plugin directory or None, notice for the output)."""
    try:
        import ansible_mitogen.plugins.strategy as plugins
    except ImportError as exc:
        return "linear", None, f"Mitogen is not available ({exc}); running with Ansible's linear strategy."
    return "mitogen_linear", os.path.dirname(plugins.__file__), ""


def private_data_dir(stage_run: StageRun) -> Path:
    return Path(settings.STATE_DIR) / "runs" / str(stage_run.run_id) / f"{stage_run.order:02d}-{stage_run.stage}"


def _environment(directory: Path, strategy_name: str, plugin_dir: str | None) -> dict:
    # ansible-playbook is found on this PATH: the one installed next to the running interpreter.
    venv_bin = str(Path(sys.executable).parent)
    state = Path(settings.STATE_DIR)
    env = {
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        # Host keys are checked: each host's known_hosts file is named in its inventory (ssh_common_args).
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        # Seconds to set up a connection (SSH, then sudo and the node's interpreter): a loaded controller
        # opening every node at once needs more than Ansible's 10.
        "ANSIBLE_TIMEOUT": "30",
        # Everything Ansible writes stays under the state directory, never in the OS user's home.
        "ANSIBLE_HOME": str(state / "ansible"),
        "ANSIBLE_LOCAL_TEMP": str(directory / "tmp" / "local"),
        # Tasks delegated to the controller (Redfish) keep their temporary files here, never in the home
        # folder; a node's own `ansible_remote_tmp` (inventory) wins for the node.
        "ANSIBLE_REMOTE_TEMP": str(directory / "tmp" / "remote"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(state / "ansible" / "cp"),
        "ANSIBLE_STRATEGY": strategy_name,
        # On: the next ansible-core break shows in a run's output first (the stage tests fail on a new one).
        "ANSIBLE_DEPRECATION_WARNINGS": "True",
    }
    # No ANSIBLE_PYTHON_INTERPRETER: each host's interpreter is in the inventory (the node's own Python);
    # tasks delegated to the controller run with its interpreter through the implicit localhost.
    if plugin_dir:
        env["ANSIBLE_STRATEGY_PLUGINS"] = plugin_dir
    config = Path(settings.PLAYBOOKS_DIR) / "ansible.cfg"
    if config.is_file():
        env["ANSIBLE_CONFIG"] = str(config)
    return env


def _stdout_tail(directory: Path, ident: str, lines: int = 15) -> str:
    path = directory / "artifacts" / ident / "stdout"
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def scrub_artifacts(directory: Path, secret_values: list[str]) -> int:
    """Mask the run's secrets in what ansible-runner kept (stdout, job events, fact cache): a task without
    no_log that printed one would otherwise leave it on disk. Returns the number of files rewritten."""
    secrets = [value.encode() for value in secret_values if value]
    rewritten = 0
    for path in (directory / "artifacts").rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        cleaned = data
        for secret in secrets:
            cleaned = cleaned.replace(secret, MASK.encode())
        if cleaned != data:
            write_private(path, cleaned)
            rewritten += 1
    return rewritten


def execute(stage_run: StageRun, playbook: Path, playbook_input: PlaybookInput, *, dry_run: bool,
            facts_sink: FactsSink | None, should_cancel: Callable[[], bool], tick: Callable | None = None,
            on_event: Callable | None = None) -> StageExecution:
    directory = private_data_dir(stage_run)
    if directory.exists():
        # A stage run is executed once; leftovers are from a worker that died before recording anything.
        shutil.rmtree(directory)
    (directory / "inventory").mkdir(parents=True, mode=0o700)
    (directory / "tmp" / "local").mkdir(parents=True, mode=0o700)
    (directory / "tmp" / "remote").mkdir(parents=True, mode=0o700)
    (directory / "secrets").mkdir(mode=0o700)
    (Path(settings.STATE_DIR) / "ansible" / "cp").mkdir(parents=True, exist_ok=True)

    write_private(directory / "inventory" / "hosts.json", json.dumps(playbook_input.inventory, indent=2))
    write_private(directory / "secrets.masked.json", json.dumps(playbook_input.masked_secrets(), indent=2))
    secrets_file = directory / "secrets" / "vars.json"
    write_private(secrets_file, json.dumps(playbook_input.secrets))

    strategy_name, plugin_dir, notice = strategy()
    ingestor = EventIngestor(stage_run, Scrubber(playbook_input.secret_values), facts_sink=facts_sink,
                             on_event=on_event)
    cancel_flag = threading.Event()
    cmdline = f"-e @{secrets_file}"
    if dry_run:
        cmdline += " --check --diff"
    ident = "ansible"
    thread = None
    try:
        thread, runner = ansible_runner.run_async(
            private_data_dir=str(directory), project_dir=str(settings.PLAYBOOKS_DIR), playbook=str(playbook),
            ident=ident, extravars=playbook_input.extravars, envvars=_environment(directory, strategy_name, plugin_dir),
            cmdline=cmdline, quiet=True,
            event_handler=ingestor.handle, cancel_callback=cancel_flag.is_set,
            settings={"pexpect_timeout": 0.5, "suppress_ansible_output": True},
        )

        def check_cancel():
            if not cancel_flag.is_set() and should_cancel():
                cancel_flag.set()
                # Runner stops ansible-playbook only; its Mitogen multiplexers would live on.
                if ingestor.ansible_pid and is_ansible(ingestor.ansible_pid):
                    kill_tree(ingestor.ansible_pid)
            if tick is not None:
                tick()

        result = ingestor.consume(thread.is_alive, tick=check_cancel, tick_seconds=1.0)
        thread.join()
    finally:
        if thread is not None and thread.is_alive():
            # The consumer failed (database gone, a bug): never leave ansible-playbook running unobserved.
            cancel_flag.set()
            thread.join(timeout=30)
        secrets_file.unlink(missing_ok=True)
        shutil.rmtree(directory / "tmp", ignore_errors=True)
        scrub_artifacts(directory, playbook_input.secret_values)
    status = "canceled" if cancel_flag.is_set() and runner.status in ("canceled", "failed") else runner.status
    return StageExecution(status, runner.rc, result, strategy_name, notice, _stdout_tail(directory, ident))
