"""The documentation: it builds strictly, every command line it shows parses with that command's own parser,
it loads nothing from elsewhere, and the portal serves it at /docs/ without leaving the built site."""

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, get_commands, load_command_class

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# A command line: optional VAR=value words, then manage.py (however it is called) or the wheel's `appliance`.
COMMAND = re.compile(r"(?:^|[\s`(])(?:\S*python3?\s+)?(?:\S*/)?(manage\.py|appliance)\s+([a-z_][a-z_-]*)(.*)")


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    environment = dict(os.environ, APPLIANCE_STATE_DIR=str(tmp_path_factory.mktemp("state")), NO_MKDOCS_2_WARNING="1")
    environment.pop("DATABASE_URL", None)
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)], cwd=ROOT,
                            env=environment, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return site


def test_the_site_builds_strictly_with_the_generated_references(built_site):
    rules = (built_site / "analytics" / "index.html").read_text()
    assert "holds-back-its-job" in rules and "ratio_to_peers" in rules
    assert "telemetry.influxdb.token_credential" in (built_site / "reference" / "site-definition" / "index.html").read_text()
    cli = (built_site / "reference" / "cli" / "index.html").read_text()
    assert "appliance site import" in cli and "--dry-run" in cli
    assert (built_site / "ru" / "operator" / "index.html").is_file()


def test_the_site_loads_no_script_style_or_font_from_elsewhere(built_site):
    external = re.compile(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=[\"'](?:https?:)?//", re.IGNORECASE)
    found = [f"{page.relative_to(built_site)}: {match.group(0)}" for page in built_site.rglob("*.html")
             for match in external.finditer(page.read_text())]
    assert not found, found
    for sheet in built_site.rglob("*.css"):
        assert not re.search(r"@import\s+url\([\"']?https?:|url\([\"']?https?://", sheet.read_text()), sheet


def command_lines() -> list[tuple[str, str, str, bool]]:
    """(where, program, command line) of every manage.py / appliance command line in the README and the
    docs: in code blocks (parsed whole) and in code spans (a mention: its sub-commands and options checked)."""
    found = []
    for page in PAGES:
        fenced = False
        for number, line in enumerate(page.read_text().replace("\\\n", " ").splitlines(), start=1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            for span in [line] if fenced else re.findall(r"`([^`]+)`", line):
                for match in COMMAND.finditer(span):
                    found.append((f"{page.relative_to(ROOT)}:{number}", match.group(1),
                                  f"{match.group(2)} {match.group(3)}".strip(), fenced))
    return found


def _words(line: str) -> list[str]:
    line = line.split(" #", 1)[0].split("`", 1)[0]
    line = re.split(r"\s(?:&&|\|\||;|\|)\s", line, maxsplit=1)[0]
    try:
        return shlex.split(line)
    except ValueError:
        return line.split()


def _subparsers(parser) -> dict:
    return {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}


def _options(parser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


NOTATION = re.compile(r"[\[\]|]|\.\.\.|^[A-Z][A-Z_]+$")


@pytest.mark.django_db(databases=[])
def test_every_command_line_shown_parses_with_its_command(settings):
    commands = get_commands()
    lines = command_lines()
    checked, problems = 0, []
    for where, program, line, whole in lines:
        words = _words(line)
        if not words or words[0] not in commands:
            # `appliance` is also the product's name in prose; `manage.py` is always a command.
            if program == "manage.py":
                problems.append(f"{where}: unknown command {words[0] if words else ''!r}: {line}")
            continue
        top = parser = load_command_class(commands[words[0]], words[0]).create_parser("manage.py", words[0])
        arguments = words[1:]
        # Sub-commands, then every option named must be one of that (sub)parser's own.
        position = 0
        while position < len(arguments) and arguments[position] in _subparsers(parser):
            parser = _subparsers(parser)[arguments[position]]
            position += 1
        if _subparsers(parser) and position < len(arguments) and not arguments[position].startswith("-"):
            problems.append(f"{where}: {arguments[position]!r} is not a sub-command of {words[0]}: {line}")
            continue
        for word in arguments[position:]:
            option = word.split("=", 1)[0]
            if option.startswith("--") and option not in _options(parser):
                problems.append(f"{where}: {option} is not an option of {' '.join(words[:position + 1])}: {line}")
        if whole and not any(NOTATION.search(word) for word in arguments):
            try:
                top.parse_args(arguments)
            except (CommandError, SystemExit) as error:
                problems.append(f"{where}: {line}: {error}")
        checked += 1
    assert checked >= 20, f"only {checked} command lines found"
    assert not problems, "\n".join(problems)


def test_the_cli_reference_covers_every_command_of_the_appliance():
    text = (ROOT / "docs" / "reference" / "cli.md").read_text()
    assert "<!-- generated: cli -->" in text
    names = [name for name, app in get_commands().items() if app.startswith("appliance.")]
    assert "docs" in names and "bootstrap" in names and "site" in names


def test_a_path_outside_the_built_site_is_not_served(tmp_path):
    from django.http import Http404

    from appliance.portal.views_docs import resolve

    site = tmp_path / "site"
    (site / "operator").mkdir(parents=True)
    (site / "index.html").write_text("home")
    (site / "operator" / "index.html").write_text("guide")
    (tmp_path / "secret.txt").write_text("key")
    (site / "link").symlink_to(tmp_path / "secret.txt")
    assert resolve(site, "").read_text() == "home"
    assert resolve(site, "operator/").read_text() == "guide"
    for attempt in ("../secret.txt", "operator/../../secret.txt", "link", "/etc/passwd", "%2e%2e/secret.txt",
                    "missing.html", "a\0b"):
        with pytest.raises(Http404):
            resolve(site, attempt)


@pytest.mark.django_db
def test_the_portal_serves_the_documentation_to_a_signed_in_user(client, django_user_model, settings, tmp_path,
                                                                 monkeypatch):
    from appliance.portal import docs

    site = tmp_path / "docs" / "site"
    (site / "operator").mkdir(parents=True)
    (site / "index.html").write_text("<h1>Appliance</h1>")
    (site / "operator" / "index.html").write_text("<h1>Guide</h1>")
    monkeypatch.setattr(docs, "ensure_built", lambda: site)
    assert client.get("/docs/").status_code == 302  # to the login page
    user = django_user_model.objects.create_user("viewer-docs", password="x" * 16)
    from appliance.core.roles import Role

    if hasattr(user, "role"):
        user.role = Role.VIEWER
        user.save()
    client.force_login(user)
    answer = client.get("/docs/")
    assert answer.status_code == 200 and b"Appliance" in b"".join(answer.streaming_content)
    assert client.get("/docs/operator").status_code == 301
    assert client.get("/docs/operator/").status_code == 200
    assert client.get("/docs/../../etc/passwd").status_code == 404
    assert client.get("/docs/%2e%2e/%2e%2e/etc/passwd").status_code == 404


@pytest.mark.django_db
def test_documentation_pages_allow_the_themes_inline_scripts_by_hash_and_nothing_else(client, django_user_model,
                                                                                       settings, tmp_path):
    """The site the appliance builds runs Material's inline scripts (its storage scope, the saved palette) under
    a policy that names each by its SHA-256; no page of the site holds an inline script it does not name, no
    'unsafe-inline' anywhere, and the rest of the portal keeps the policy without inline scripts."""
    from appliance.core.roles import Role
    from appliance.portal import docs

    settings.STATE_DIR = tmp_path / "state"
    site = docs.build()
    recorded = docs.script_hashes(site)
    assert recorded and docs.is_current()
    scripts = {page: docs.inline_scripts(page.read_text()) for page in site.rglob("*.html")}
    assert any('__md_get("__palette")' in script for found in scripts.values() for script in found)

    user = django_user_model.objects.create_user("viewer-csp", password="x" * 16)
    user.role = Role.VIEWER
    user.save()
    client.force_login(user)
    for page in (site / "index.html", site / "audit" / "index.html", site / "ru" / "operator" / "index.html"):
        path = page.parent.relative_to(site).as_posix()
        answer = client.get("/docs/" + ("" if path == "." else path + "/"))
        assert answer.status_code == 200
        policy = dict(part.split(" ", 1) for part in answer["Content-Security-Policy"].split("; "))
        allowed = policy["script-src"].split()
        assert allowed[0] == "'self'" and "'unsafe-inline'" not in policy["script-src"]
        assert {f"'{docs.csp_hash(script)}'" for script in scripts[page]} <= set(allowed), page
        assert policy["default-src"] == "'self'" and policy["object-src"] == "'none'"
        assert "'unsafe-inline'" not in policy["style-src"]
    stylesheet = next(site.rglob("*.css")).relative_to(site).as_posix()
    assert "sha256-" not in client.get("/docs/" + stylesheet)["Content-Security-Policy"]
    assert client.get("/docs/" + docs.SCRIPT_HASHES_NAME).status_code == 404
    portal = client.get("/")
    assert dict(part.split(" ", 1) for part in portal["Content-Security-Policy"].split("; "))["script-src"] == "'self'"


def test_a_changed_inline_script_is_not_allowed_by_the_recorded_hashes(tmp_path):
    from appliance.portal import docs

    (tmp_path / "index.html").write_text('<script>var a=1</script><script src="x.js"></script>'
                                         '<script type="application/json">{"b": 2}</script>')
    assert docs.record_script_hashes(tmp_path) == [docs.csp_hash("var a=1")]
    assert docs.csp_hash("var a=2") not in docs.script_hashes(tmp_path)
    # The standard's example: 'sha256-' and the base64 of the SHA-256 of the script's text.
    assert docs.csp_hash("alert('Hello, world.');") == "sha256-qznLcsROx4GACP2dm0UCKCzCG+HiZ1guq6ZZDob/Tng="
