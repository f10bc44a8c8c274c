"""Every validation pattern of the product refuses a valid-looking value with a trailing newline, the way the
product uses it. `$` also matches before a final newline, so `^name$` with .match or .search (and Django's and
DRF's RegexField and RegexValidator, which search) accepts "production\n". The sweep walks the appliance's
modules, takes each module-level compiled pattern anchored with `^...$` (MULTILINE ones scan text, they do
not validate), finds where the product's code calls it with .match or .search or hands it to a regex field or
validator, generates a value the pattern accepts in full (hypothesis), and feeds that value plus a newline to
each of those uses. A pattern only ever used with .fullmatch is safe as it is; one that is matched or
searched must end with \\Z (or be used with .fullmatch)."""

import ast
import importlib
import pkgutil
import re
from pathlib import Path

from hypothesis import find
from hypothesis import strategies as st

import appliance

ROOT = Path(appliance.__file__).parent
SEARCHING_CONSTRUCTORS = {"RegexField", "RegexValidator"}
# Programs a simulated node or BMC emulator runs (they read their own environment at import): not the product's
# validation of what users send.
SCRIPTS = ("appliance.simulation.tools.", "appliance.simulation.bmc_emulator_config")
# Entry points that act when imported: a serving process starts the embedded worker and beat (their threads
# would run on in this test process, against the next tests' databases); `python -m appliance` runs the CLI.
ENTRY_POINTS = frozenset({"appliance.wsgi", "appliance.asgi", "appliance.__main__"})


def _patterns() -> dict[int, tuple[re.Pattern, set[tuple[str, str]]]]:
    """Module-level compiled `^...$` patterns: id -> (pattern, every (module, attribute) that holds it: where it
    is defined and where it is imported)."""
    found: dict[int, tuple[re.Pattern, set[tuple[str, str]]]] = {}
    for info in pkgutil.walk_packages(appliance.__path__, "appliance."):
        if ".migrations" in info.name or info.name.startswith(SCRIPTS) or info.name in ENTRY_POINTS:
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (isinstance(value, re.Pattern) and isinstance(value.pattern, str) and value.pattern.startswith("^")
                    and value.pattern.endswith("$") and not value.pattern.endswith("\\$")
                    and not value.flags & re.MULTILINE):
                found.setdefault(id(value), (value, set()))[1].add((info.name, name))
    return found


# Patterns the sweep still catches. A ratchet: the test fails when one is fixed and not removed here, and when a
# new one appears. Issue 40 fixed the lifecycle's and lending's by calling them with .fullmatch; the rest of the
# product followed (.fullmatch where the code matches, \Z where a regex field or validator searches). Several
# patterns share one compiled object with another module's identical pattern (re's cache), so a .match anywhere
# on that text counts for all of them.
PENDING: set[str] = set()


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _uses() -> dict[tuple[str, str], set[str]]:
    """(defining module, attribute) -> how the product's code uses it: "match", "search" (also a regex field or
    validator). A name counts in its own module, where it is imported by name, or as module.NAME."""
    uses: dict[tuple[str, str], set[str]] = {}
    for path in ROOT.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        here = _module_name(path)
        tree = ast.parse(path.read_text(), str(path))
        imported = {}  # local name -> (module, attribute)
        modules = {}  # local name -> module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module is not None:
                base = node.module
                if node.level:
                    package = here.split(".")[: len(here.split(".")) - node.level + (path.name == "__init__.py")]
                    base = ".".join([*package, node.module]) if node.module else ".".join(package)
                for alias in node.names:
                    imported[alias.asname or alias.name] = (base, alias.name)
                    modules[alias.asname or alias.name] = f"{base}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    modules[alias.asname or alias.name] = alias.name

        def target(expression, imported=imported, modules=modules, here=here):
            if isinstance(expression, ast.Name):
                return imported.get(expression.id, (here, expression.id))
            if isinstance(expression, ast.Attribute) and isinstance(expression.value, ast.Name):
                return (modules.get(expression.value.id, expression.value.id), expression.attr)
            return None

        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("match", "search"):
                key = target(node.func.value)
                if key is not None:
                    uses.setdefault(key, set()).add(node.func.attr)
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name in SEARCHING_CONSTRUCTORS:
                for argument in [*node.args[:1], *(k.value for k in node.keywords if k.arg == "regex")]:
                    key = target(argument)
                    if key is not None:
                        uses.setdefault(key, set()).add("search")
    return uses


def test_the_sweep_finds_the_patterns_it_is_about():
    """The sweep is not empty: the lifecycle's name and alias patterns are among what it checks."""
    patterns = _patterns()
    holders = set().union(*(names for _, names in patterns.values()))
    assert {("appliance.lifecycle.services", "NAME"), ("appliance.lifecycle.services", "ALIAS")} <= holders
    assert len(patterns) >= 40


def test_no_validation_pattern_accepts_a_trailing_newline_where_it_is_matched_or_searched():
    uses = _uses()
    accepted = []
    for pattern, holders in _patterns().values():
        methods = set().union(*(uses.get(holder, set()) for holder in holders))
        if not methods:
            continue
        sample = find(st.from_regex(pattern, fullmatch=True), lambda value: True)
        module, name = min(holders)
        for method in sorted(methods):
            if getattr(pattern, method)(sample + "\n") is not None:
                accepted.append(f"{module}.{name}")
    assert sorted(set(accepted)) == sorted(PENDING)
