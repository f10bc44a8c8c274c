"""Every page of the portal in Russian: it renders for a Russian reader, and its heading is Russian."""

import re

from django.test import Client

from appliance.core.roles import Role
from tests.core.test_i18n import RUSSIAN
from tests.e2e.portal_pages import portal_objects, portal_pages  # noqa: F401 (a fixture)


def _h1(html: str) -> str:
    match = re.search(r"<h1[^>]*>(.*?)</h1>", html, flags=re.S)
    return re.sub(r"<[^>]+>|\s+", " ", match.group(1)).strip() if match else ""


def test_every_portal_page_renders_in_russian_with_a_russian_heading(users, portal_objects):  # noqa: F811
    """Every page of the portal (from the URL conf) renders for a Russian reader, and its heading is not
    the English one: a template error that only a translation triggers, or an untranslated page, fails."""
    client = Client()
    client.force_login(users[Role.ADMINISTRATOR])
    checked, problems = [], []
    for page in portal_pages(portal_objects):
        english = client.get(page.url)
        if english.status_code in (301, 302, 403, 405) or 'class="skip-link"' not in english.content.decode():
            continue  # a form's target (POST only), a redirect, or a fragment or file outside the frame
        russian = client.get(page.url, **RUSSIAN)
        checked.append(page.name)
        body = russian.content.decode()
        if russian.status_code != english.status_code or '<html lang="ru">' not in body:
            problems.append((page.name, russian.status_code, "not a Russian page"))
        elif not _h1(body) or _h1(body) == _h1(english.content.decode()):
            problems.append((page.name, _h1(body), "heading not translated"))
    assert len(checked) > 15
    assert problems == [], '\n'.join(map(str, problems))
