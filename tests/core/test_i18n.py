"""The portal in the reader's language, Russian first; the API and the audit log in English.

The Russian catalog is appliance/locale/ru/LC_MESSAGES/django.po, compiled to django.mo beside it
(both committed). After wrapping new strings, from the checkout's root:
    manage.py makemessages -l ru --ignore=.venv --ignore=tests --ignore=var --ignore=playbooks \
        --ignore=appliance_suite.egg-info --no-obsolete --add-location=file
then translate every new or fuzzy entry, and
    manage.py compilemessages -l ru --ignore=.venv --ignore=var --ignore=tests
The tests below fail while an entry is untranslated or fuzzy, while the code marks a string the
catalog lacks (or the catalog keeps one the code dropped), or when the .mo is not the .po compiled.
makemessages needs GNU gettext's tools (Debian's gettext, in tests/run).
"""

import ast
import gettext
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.utils import translation

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from tests.conftest import PASSWORD

CATALOG_DIR = Path(settings.BASE_DIR) / "appliance" / "locale" / "ru" / "LC_MESSAGES"
PO_FILE, MO_FILE = CATALOG_DIR / "django.po", CATALOG_DIR / "django.mo"
RUSSIAN = {"HTTP_ACCEPT_LANGUAGE": "ru-RU,ru;q=0.9,en;q=0.5"}
# What makemessages leaves out: the environment, the tests, data and build folders, the catalog itself.
NOT_SCANNED = [".venv", "tests", "var", "playbooks", "build", "staticfiles", "test-results", "appliance_suite.egg-info",
               "node_modules", "appliance/locale"]


# --- the catalog -------------------------------------------------------------------------------------

def parse_po(text: str) -> list[dict]:
    """The entries of a .po file: msgctxt, msgid, msgid_plural, msgstr (a str, or a list for plurals),
    flags. Obsolete entries (#~) are skipped. Enough of the format for what makemessages writes."""
    entries, entry, field = [], None, None

    def finish():
        if entry is not None and "msgid" in entry:
            entries.append(entry)

    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#~"):
            continue
        if not line:
            finish()
            entry, field = None, None
            continue
        if entry is None:
            entry = {"flags": set(), "msgstr_plural": {}}
        if line.startswith("#,"):
            entry["flags"].update(flag.strip() for flag in line[2:].split(","))
        elif line.startswith("#"):
            continue
        elif line.startswith('"'):
            value = ast.literal_eval(line)
            if isinstance(field, tuple):
                entry["msgstr_plural"][field[1]] += value
            else:
                entry[field] += value
        else:
            keyword, _space, value = line.partition(" ")
            plural = re.fullmatch(r"msgstr\[(\d+)\]", keyword)
            if plural:
                field = ("msgstr", int(plural.group(1)))
                entry["msgstr_plural"][field[1]] = ast.literal_eval(value)
            else:
                if keyword not in ("msgctxt", "msgid", "msgid_plural", "msgstr"):
                    raise ValueError(f"{PO_FILE}: unexpected line {line!r}")
                field = keyword
                entry[field] = ast.literal_eval(value)
    finish()
    return entries


@pytest.fixture(scope="module")
def po_entries():
    return parse_po(PO_FILE.read_text(encoding="utf-8"))


def _messages(po_entries):
    return [e for e in po_entries if e["msgid"] != ""]


def test_the_po_parser_reads_plurals_flags_and_continued_lines():
    entries = parse_po('msgid ""\nmsgstr ""\n"Language: ru\\n"\n\n'
                       '#, fuzzy, python-format\nmsgid "%(n)d node"\nmsgid_plural "%(n)d nodes"\n'
                       'msgstr[0] "%(n)d узел"\nmsgstr[1] "%(n)d "\n"узла"\nmsgstr[2] ""\n\n'
                       '#~ msgid "gone"\n#~ msgstr "нет"\n')
    assert entries[0]["msgstr"] == "Language: ru\n"
    assert entries[1]["flags"] == {"fuzzy", "python-format"}
    assert entries[1]["msgid_plural"] == "%(n)d nodes"
    assert entries[1]["msgstr_plural"] == {0: "%(n)d узел", 1: "%(n)d узла", 2: ""}
    assert len(entries) == 2


def test_the_russian_catalog_has_no_untranslated_or_fuzzy_entry(po_entries):
    messages = _messages(po_entries)
    assert len(messages) > 80
    untranslated = [e["msgid"] for e in messages
                    if ("msgid_plural" in e and not all(e["msgstr_plural"].get(i) for i in range(3)))
                    or ("msgid_plural" not in e and not e["msgstr"])]
    fuzzy = [e["msgid"] for e in po_entries if "fuzzy" in e["flags"]]
    assert untranslated == []
    assert fuzzy == []


def test_the_russian_catalog_has_three_plural_forms(po_entries):
    header = po_entries[0]["msgstr"]
    assert "Language: ru\n" in header
    assert ("Plural-Forms: nplurals=3; plural=(n%10==1 && n%100!=11 ? 0 : n%10>=2 && n%10<=4 && "
            "(n%100<10 || n%100>=20) ? 1 : 2);\n") in header
    wrong = [e["msgid"] for e in _messages(po_entries) if "msgid_plural" in e and len(e["msgstr_plural"]) != 3]
    assert wrong == []


def _placeholders(text: str) -> list[str]:
    return sorted(re.findall(r"%\(\w+\)[-+ #0-9.]*[sdifrx]|\{\w*\}", text))


def test_every_translation_keeps_the_placeholders_of_its_message(po_entries):
    """A placeholder lost or misspelt in a translation raises KeyError when the Russian page renders."""
    broken = []
    for e in _messages(po_entries):
        if "msgid_plural" in e:
            # Russian's singular form may name the count ("%(n)d узел") where English's says "one".
            allowed = (_placeholders(e["msgid"]), _placeholders(e["msgid_plural"]))
            broken += [(e["msgid"], text) for text in e["msgstr_plural"].values()
                       if text and _placeholders(text) not in allowed]
        elif e["msgstr"] and _placeholders(e["msgstr"]) != _placeholders(e["msgid"]):
            broken.append((e["msgid"], e["msgstr"]))
    assert broken == []


def test_the_compiled_catalog_is_the_po_file_compiled(po_entries):
    """The .mo committed beside the .po holds exactly its translations (compilemessages was run after
    the last edit): no entry missing, none stale."""
    expected = {}
    for e in _messages(po_entries):
        if "fuzzy" in e["flags"]:
            continue  # msgfmt leaves fuzzy entries out; the test above refuses them
        key = f"{e['msgctxt']}\x04{e['msgid']}" if "msgctxt" in e else e["msgid"]
        if "msgid_plural" in e:
            expected.update({(key, index): text for index, text in e["msgstr_plural"].items() if text})
        elif e["msgstr"]:
            expected[key] = e["msgstr"]
    with MO_FILE.open("rb") as handle:
        compiled = gettext.GNUTranslations(handle)
    catalog = {key: value for key, value in compiled._catalog.items() if key != ""}
    assert sorted(set(expected) ^ set(catalog), key=str) == []
    assert {key: value for key, value in catalog.items() if expected[key] != value} == {}


def _key(entry: dict) -> tuple:
    return entry.get("msgctxt"), entry["msgid"], entry.get("msgid_plural")


@pytest.mark.sqlite_only
def test_the_catalog_holds_every_message_the_code_marks_and_no_other(tmp_path, po_entries):
    """makemessages run afresh over the checkout (into a scratch folder) finds exactly the catalog's
    messages: a string wrapped without being translated, or one the code no longer has, fails here."""
    script = ("import sys, django\n"
              "from django.conf import settings\n"
              "django.setup()\n"
              "settings.LOCALE_PATHS = [sys.argv[1]]\n"
              "from django.core.management import call_command\n"
              "call_command('makemessages', locale=['ru'], ignore_patterns=sys.argv[2:], no_obsolete=True,\n"
              "             verbosity=0)\n")
    env = {**os.environ, "APPLIANCE_STATE_DIR": str(tmp_path / "state"), "DJANGO_SETTINGS_MODULE": "appliance.settings"}
    env.pop("DATABASE_URL", None)
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "locale"), *NOT_SCANNED], cwd=settings.BASE_DIR,
                   env=env, check=True, capture_output=True, timeout=300)
    fresh = parse_po((tmp_path / "locale" / "ru" / "LC_MESSAGES" / "django.po").read_text(encoding="utf-8"))
    in_code = {_key(e) for e in _messages(fresh)}
    in_catalog = {_key(e) for e in _messages(po_entries)}
    assert sorted(in_code - in_catalog, key=str) == []
    assert sorted(in_catalog - in_code, key=str) == []


@pytest.mark.parametrize(("count", "expected"), [
    (1, "Отозван 1 токен."), (21, "Отозван 21 токен."), (101, "Отозван 101 токен."),
    (2, "Отозвано 2 токена."), (4, "Отозвано 4 токена."), (22, "Отозвано 22 токена."),
    (0, "Отозвано 0 токенов."), (5, "Отозвано 5 токенов."), (11, "Отозвано 11 токенов."),
    (12, "Отозвано 12 токенов."), (14, "Отозвано 14 токенов."), (111, "Отозвано 111 токенов."),
])
def test_russian_counts_take_the_right_form(count, expected):
    with translation.override("ru"):
        text = translation.ngettext("Revoked %(count)d token.", "Revoked %(count)d tokens.", count) % {"count": count}
    assert text == expected


# --- pages -------------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_the_portal_is_english_by_default_and_russian_for_a_russian_browser(make_user):
    client = Client()
    client.force_login(make_user(Role.ADMINISTRATOR, "anna"))
    english = client.get("/")
    assert english.status_code == 200
    assert english["Content-Language"] == "en"
    assert '<span class="role" data-testid="current-role">Administrator</span>' in english.content.decode()

    russian = client.get("/", **RUSSIAN)
    assert russian.status_code == 200
    assert russian["Content-Language"] == "ru"
    assert '<span class="role" data-testid="current-role">Администратор</span>' in russian.content.decode()


def test_the_login_page_speaks_the_browser_language(db):
    english = Client().get("/accounts/login/").content.decode()
    assert '<html lang="en">' in english
    assert "<h1>Log in</h1>" in english and '<label for="id_username">Username</label>' in english

    russian = Client().get("/accounts/login/", **RUSSIAN).content.decode()
    assert '<html lang="ru">' in russian
    assert "<h1>Войти</h1>" in russian
    assert '<label for="id_username">Имя пользователя</label>' in russian
    assert '<label for="id_password">Пароль</label>' in russian
    assert "Log in" not in russian


@pytest.mark.django_db
def test_the_overview_speaks_russian(make_user):
    client = Client()
    client.force_login(make_user(Role.VIEWER, "vera"))
    page = client.get("/", **RUSSIAN).content.decode()
    assert "<h1>Обзор</h1>" in page
    assert "Перейти к содержимому" in page  # the skip link of the frame
    assert "Overview" not in page.split("<main", 1)[1]


@pytest.mark.django_db
def test_a_language_the_portal_does_not_speak_falls_back_to_english(make_user):
    client = Client()
    client.force_login(make_user(Role.OPERATOR, "otto"))
    response = client.get("/", HTTP_ACCEPT_LANGUAGE="de-DE,de;q=0.9")
    assert response["Content-Language"] == "en"
    assert '<span class="role" data-testid="current-role">Operator</span>' in response.content.decode()


@pytest.mark.django_db
def test_the_language_switch_sets_a_cookie_the_portal_follows(make_user):
    client = Client()
    client.force_login(make_user(Role.AUDITOR, "ivan"))
    response = client.post("/i18n/setlang/", {"language": "ru", "next": "/"})
    assert response.status_code == 302 and response["Location"] == "/"
    cookie = response.cookies[settings.LANGUAGE_COOKIE_NAME]
    assert (cookie.value, cookie["httponly"], cookie["samesite"]) == ("ru", True, "Lax")
    page = client.get("/", HTTP_ACCEPT_LANGUAGE="en")  # the reader's choice beats the browser's
    assert '<span class="role" data-testid="current-role">Аудитор</span>' in page.content.decode()

    client.post("/i18n/setlang/", {"language": "en", "next": "/"})
    assert '<span class="role" data-testid="current-role">Auditor</span>' in client.get("/").content.decode()


@pytest.mark.django_db
def test_the_language_switch_refuses_a_foreign_next_address(make_user):
    client = Client()
    response = client.post("/i18n/setlang/", {"language": "ru", "next": "https://evil.example/"})
    assert response.status_code == 302 and response["Location"] == "/"


@pytest.mark.django_db
def test_portal_notices_and_form_errors_are_in_russian(make_user):
    client = Client()
    client.force_login(make_user(Role.ADMINISTRATOR, "anna"))
    created = client.post("/accounts/users/new/", {
        "username": "boris", "email": "", "role": Role.OPERATOR, "password1": PASSWORD, "password2": PASSWORD,
    }, follow=True, **RUSSIAN)
    assert "Пользователь boris создан (Оператор)." in created.content.decode()

    refused = client.post("/accounts/users/new/", {
        "username": "boris", "email": "", "role": Role.VIEWER, "password1": PASSWORD, "password2": "other-password-1",
    }, **RUSSIAN)
    text = refused.content.decode()
    assert "пользователь с таким именем уже существует" in text
    assert "пароли не совпадают" in text


@pytest.mark.django_db
def test_a_refusal_reads_russian_on_the_page_and_english_in_the_audit_log(make_user):
    client = Client()
    client.force_login(make_user(Role.VIEWER, "vera"))
    response = client.get("/accounts/users/", **RUSSIAN)
    assert response.status_code == 403
    assert "Ваша роль этого не позволяет." in response.content.decode()
    record = AuditRecord.objects.filter(event="access.denied").latest("sequence")
    assert (record.actor_username, record.reason) == ("vera", "Your role does not allow this.")


@pytest.mark.django_db
def test_the_api_answers_in_english_whatever_the_client_asks(make_user):
    anonymous = Client().get("/api/v1/inventory/nodes/", **RUSSIAN)
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["message"] == "Authentication credentials were not provided."
    assert anonymous.get("Content-Language") is None

    client = Client()
    client.force_login(make_user(Role.VIEWER, "vera"))
    refused = client.post("/api/v1/accounts/users/", {}, content_type="application/json", **RUSSIAN)
    assert refused.status_code == 403
    assert refused.json()["error"]["message"] == "Your role does not allow this."
    record = AuditRecord.objects.filter(event="access.denied").latest("sequence")
    assert record.reason == "Your role does not allow this."


@pytest.mark.django_db
@pytest.mark.parametrize(("idle_seconds", "expected"), [
    (60, "Сеанс завершён из-за бездействия (1 минута); войдите снова."),
    (120, "Сеанс завершён из-за бездействия (2 минуты); войдите снова."),
    (300, "Сеанс завершён из-за бездействия (5 минут); войдите снова."),
])
def test_the_session_ending_notice_is_russian_with_the_right_plural(users, settings, idle_seconds, expected):
    settings.SESSION_IDLE_TIMEOUT = idle_seconds
    client = Client(**RUSSIAN)
    assert client.post("/accounts/login/", {"username": "viewer-user", "password": PASSWORD}).status_code == 302
    session = client.session
    session["_last_activity"] -= idle_seconds + 1
    session.save()
    response = client.get("/inventory/nodes/", follow=True)
    assert expected in response.content.decode()


@pytest.mark.django_db
def test_the_stage_catalogue_describes_the_stages_in_russian(make_user, inventory):
    client = Client()
    client.force_login(make_user(Role.OPERATOR, "otto"))
    page = client.get("/provisioning/", **RUSSIAN).content.decode()
    assert "Драйвер NVIDIA, persistence daemon, fabric manager (NVSwitch), DCGM; проверка через NVML." in page
    assert "NVIDIA driver, persistence daemon" not in page



@pytest.mark.django_db
def test_audit_records_made_while_the_reader_is_russian_are_english(inventory):
    """A run's name shows its kind's label, which the portal translates: its record names it in English."""
    from appliance import audit
    from appliance.core.permissions import ROLE_REFUSED
    from appliance.provisioning.models import Run

    run = Run.objects.create(appliance=inventory.appliance, kind=Run.Kind.BOOTSTRAP, stages=["os"])
    with translation.override("ru"):
        assert str(run) == f"run #{run.pk} (Развёртывание)"
        entry = audit.record("access.denied", target=run, outcome="denied", reason=ROLE_REFUSED,
                             details={"kind": Run.Kind(run.kind).label})
    stored = AuditRecord.objects.get(sequence=entry.sequence)
    assert stored.target_name == f"run #{run.pk} (Bootstrap)"
    assert stored.reason == "Your role does not allow this."
    assert stored.details == {"kind": "Bootstrap"}
