"""Content-Security-Policy on every page, no inline script or style the policy would block, and the
portal's static files served with DEBUG off (development: from the apps; production: collected)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from appliance.core.roles import Role

ROOT = Path(__file__).resolve().parents[2]
STRICT = ("default-src 'self'; script-src 'self'; style-src 'self' 'nonce-{nonce}'; worker-src 'self' blob:; "
          "img-src 'self' data:; font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
          "form-action 'self'; frame-ancestors 'none'")


def nonce_of(response) -> str:
    match = re.search(r"'nonce-([A-Za-z0-9_-]+)'", response["Content-Security-Policy"])
    assert match, response["Content-Security-Policy"]
    return match.group(1)


@pytest.mark.django_db
def test_every_page_has_a_strict_policy_with_a_fresh_nonce(client_for):
    first = Client().get("/accounts/login/")
    second = Client().get("/accounts/login/")
    assert first.status_code == 200
    assert first["Content-Security-Policy"] == STRICT.format(nonce=nonce_of(first))
    assert nonce_of(first) != nonce_of(second)
    overview = client_for(Role.OPERATOR).get("/")
    assert overview["Content-Security-Policy"] == STRICT.format(nonce=nonce_of(overview))
    api = client_for(Role.OPERATOR).get("/api/v1/inventory/nodes/")
    assert "script-src 'self';" in api["Content-Security-Policy"]


INLINE_SCRIPT = re.compile(r"<script\b(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)
STYLE_WITHOUT_NONCE = re.compile(r"<style\b(?![^>]*\bnonce=)[^>]*>", re.IGNORECASE)
STYLE_ATTRIBUTE = re.compile(r"\sstyle\s*=", re.IGNORECASE)
EVENT_HANDLER = re.compile(r"\son[a-z]+\s*=\s*[\"']", re.IGNORECASE)
# The Redoc page is served with inline styles allowed (Redoc writes <style> elements at run time).
POLICY_EXEMPT = {"drf_spectacular/redoc.html"}


def test_no_template_has_what_the_policy_blocks():
    offences = []
    for template in sorted((ROOT / "templates").rglob("*.html")):
        name = template.relative_to(ROOT / "templates").as_posix()
        text = template.read_text()
        for pattern in (INLINE_SCRIPT, EVENT_HANDLER) + (() if name in POLICY_EXEMPT else (STYLE_WITHOUT_NONCE,
                                                                                             STYLE_ATTRIBUTE)):
            offences += [f"{name}: {m.group(0)}" for m in pattern.finditer(text)]
    assert offences == []


def test_pattern_catches_an_inline_script():
    assert INLINE_SCRIPT.search('<p><script>alert(1)</script>')
    assert not INLINE_SCRIPT.search('<script src="/static/js/htmx.min.js" defer></script>')
    assert STYLE_WITHOUT_NONCE.search("<style>body{}</style>")
    assert not STYLE_WITHOUT_NONCE.search('<style nonce="abc">body{}</style>')


@pytest.mark.django_db
def test_api_docs_load_their_scripts_from_files(client_for):
    client = client_for(Role.OPERATOR)
    page = client.get("/api/v1/schema/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert not INLINE_SCRIPT.search(html)
    assert f'<style nonce="{nonce_of(page)}">' in html
    script_url = re.search(r'<script src="([^"]*script=[^"]*)"', html).group(1).replace("&amp;", "&")
    script = client.get(script_url)
    assert script.status_code == 200 and script["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle" in script.content.decode()
    redoc = client.get("/api/v1/schema/redoc/")
    assert redoc.status_code == 200 and not INLINE_SCRIPT.search(redoc.content.decode())
    assert "script-src 'self';" in redoc["Content-Security-Policy"]
    assert "style-src 'self' 'unsafe-inline';" in redoc["Content-Security-Policy"]
    assert "fonts.googleapis.com" not in redoc.content.decode()


@pytest.mark.django_db
def test_static_files_are_served_with_debug_off(settings):
    assert settings.DEBUG is False
    response = Client().get("/static/css/appliance.css")
    assert response.status_code == 200
    assert b":root { --bg:" in b"".join(response.streaming_content)
    assert Client().get("/static/js/htmx.min.js").status_code == 200


def manage(*args, env: dict, cwd=ROOT) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL", "APPLIANCE_"))}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=cwd, env={**clean, **env},
                          capture_output=True, text=True, timeout=300)


FETCH = """
from django.test import Client
client = Client()
for path in ("/static/css/appliance.css", "/static/js/htmx.min.js",
             "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js", "/static/no-such-file.css"):
    response = client.get(path, secure=True)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    print(path, response.status_code, len(body), body[:13])
"""


@pytest.mark.sqlite_only
def test_production_serves_the_static_files_collected_at_install(tmp_path):
    env = {"APPLIANCE_STATE_DIR": str(tmp_path / "state"), "APPLIANCE_ENV": "production",
           "DJANGO_SECRET_KEY": "x" * 60, "DJANGO_ALLOWED_HOSTS": "testserver"}
    before = manage("shell", "-c", FETCH, env=env)
    assert before.returncode == 0, before.stderr
    assert "/static/css/appliance.css 404" in before.stdout  # nothing collected yet: production serves only what was
    collected = manage("collectstatic", "--noinput", env=env)
    assert collected.returncode == 0, collected.stderr
    assert (tmp_path / "state" / "static" / "css" / "appliance.css").is_file()
    after = manage("shell", "-c", FETCH, env=env)
    assert after.returncode == 0, after.stderr
    lines = dict(line.split(" ", 1) for line in after.stdout.splitlines() if line.startswith("/static/"))
    assert lines["/static/css/appliance.css"].startswith("200 ")
    assert lines["/static/css/appliance.css"].endswith("b':root { --bg:'")
    assert lines["/static/js/htmx.min.js"].startswith("200 ")
    assert lines["/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"].startswith("200 ")
    assert lines["/static/no-such-file.css"].startswith("404 ")
