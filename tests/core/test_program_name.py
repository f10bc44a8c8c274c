"""Messages name the command the operator has: an installed wheel's `appliance ...`, a checkout's
`manage.py ...` (appliance.core.resources.program), never `manage.py` to the user of a wheel."""

import ast
from pathlib import Path

import pytest

from appliance.core import resources

ROOT = Path(__file__).resolve().parents[2]
# String literals that say manage.py on purpose or not yet: where, and why.
KEPT = {
    "appliance/audit/capture/commands.py": "the parser's prog name inside a CLI audit record (stays stable)",
    "appliance/audit/export/formats.py": "the process name of CLI events in exported records (stays stable)",
    "appliance/audit/management/commands/audit.py": "the user agent string of retention's own audit request",
    "appliance/core/resources.py": "program() itself",
    "appliance/provisioning/management/commands/bootstrap.py": "the checkout's own command line, when not installed",
    "appliance/simulation/sshd.py": "comments in the sudoers drop-in and the service account's GECOS field",
    "appliance/simulation/state.py": "read by the simulated tools on a node, which import no Django",
    "appliance/simulation/workload.py": "the workload driver runs as a process of its own and imports no Django at "
                                         "module level (one message)",
}


def literals_naming_manage_py() -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for path in sorted((ROOT / "appliance").rglob("*.py")):
        if "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and "manage.py" in node.value
                    and id(node) not in docstrings):
                found.setdefault(path.relative_to(ROOT).as_posix(), []).append(node.lineno)
    return found


def test_no_message_hard_codes_manage_py():
    unexplained = {path: lines for path, lines in literals_naming_manage_py().items() if path not in KEPT}
    assert unexplained == {}, "say {resources.program()} instead of manage.py in these messages"


@pytest.mark.django_db
def test_an_installed_wheel_s_messages_say_appliance(monkeypatch):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    monkeypatch.setattr(resources, "INSTALLED", True)
    assert resources.program() == "appliance"
    with pytest.raises(CommandError) as refused:
        call_command("simulation", "status")
    assert str(refused.value) == ("no simulated appliance in the inventory: import a site first "
                                  "(appliance site import)")
    monkeypatch.setattr(resources, "INSTALLED", False)
    with pytest.raises(CommandError) as refused:
        call_command("simulation", "status")
    assert str(refused.value).endswith("(manage.py site import)")
