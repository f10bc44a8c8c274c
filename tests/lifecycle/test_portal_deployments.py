"""The deployments page and the model card downloads ("portal" part), on the demo appliance's simulated
inference pool: deploy a production version from the page and see what the pool reports, a changed file
blocks the next deployment with one message naming it, rollback in one action, the card as downloads."""

import re

import pytest
from django.test import Client

from appliance.audit.models import AuditRecord
from appliance.core.roles import Role
from appliance.lifecycle import integrity
from appliance.lifecycle.models import Deployment, ModelVersion

from .deploy_support import demo  # noqa: F401 (fixture)
from .portal_support import model_root, people, register, to_production  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def error_messages(response) -> list[str]:
    return [re.sub(r"<[^>]+>", "", text).strip()
            for text in re.findall(r'<li class="error">(.*?)</li>', response.content.decode(), flags=re.S)]


def deployment_card(html: str, name: str) -> str:
    match = re.search(rf'<section class="card deployment-card" id="deployment-\d+" data-deployment="{name}" '
                      rf'data-state="healthy">(.*?)</section>', html, flags=re.S)
    assert match, f"no healthy deployment {name}"
    return match.group(1)


def test_deploy_from_the_page_shows_the_live_state_then_a_changed_file_blocks_and_rollback_restores(
        demo, model_root, people, make_user):  # noqa: F811
    first = to_production(register(model_root, "qa-bot", 11, user=people["erin"]), people["erin"], people["max"])
    olga = client_of(people["olga"])
    page = olga.get("/models/deployments/").content.decode()
    assert '<option value="qa-bot/1">qa-bot v1</option>' in page

    response = olga.post("/models/deployments/", {"version": "qa-bot/1", "runtime": "vllm", "name": "",
                                                  "context": "4096", "concurrency": "8"}, follow=True)
    html = response.content.decode()
    assert "Deploying qa-bot version 1 as qa-bot: Healthy." in html
    card = deployment_card(html, "qa-bot")
    assert "serving" in card and "not serving" not in card
    assert "1 of 1 replicas ready" in card and "the service routes to it" in card
    assert re.search(r"<td>gpu04 gpu0</td><td>qa-bot</td>", card)

    # The version's lineage: the model, its evaluation, and the deployment hanging off the evaluation.
    svg = re.search(r"<svg .*?</svg>", olga.get("/models/qa-bot/versions/1/").content.decode(), flags=re.S).group(0)
    assert re.findall(r'data-kind="(\w+)"', svg) == ["none", "none", "version", "evaluation", "deployment"]
    assert "held-out" in svg and "Healthy" in svg
    assert len(re.findall(r'class="lineage-edge"', svg)) == 2

    second = to_production(register(model_root, "qa-bot", 12, user=people["erin"]), people["erin"], people["max"])
    path = model_root / "qa-bot" / "s12" / "model.safetensors"
    path.write_bytes(path.read_bytes() + b"\0")
    refused = olga.post("/models/deployments/", {"version": "qa-bot/2", "runtime": "vllm", "name": "",
                                                 "context": "4096", "concurrency": "8"})
    assert refused.status_code == 409
    [message] = error_messages(refused)
    assert "model.safetensors" in message
    assert Deployment.objects.filter(version=second, state="blocked").count() == 1
    assert AuditRecord.objects.filter(event="lifecycle.deployment.create", outcome="failure").count() == 1

    # The file restored: a full re-hash finds it intact, yet the tampered verdict stands until an Administrator
    # clears it with a reason.
    path.write_bytes(path.read_bytes()[:-1])
    verified = olga.post("/models/qa-bot/versions/2/verify/", {"full": "1"}, follow=True)
    assert "the verdict stands until an Administrator clears it" in verified.content.decode()
    integrity.clear_tampered(second, user=make_user(Role.ADMINISTRATOR, "ada"), reason="restored the file")
    # v2 deploys and replaces v1; rollback brings v1 back in one action.
    olga.post("/models/deployments/", {"version": "qa-bot/2", "runtime": "vllm", "name": "", "context": "4096",
                                       "concurrency": "8"})
    assert Deployment.objects.get(state="healthy").version == second
    response = olga.post("/models/deployments/rollback/", {"service": "qa-bot", "reason": "v2 answers worse"},
                         follow=True)
    assert "qa-bot rolled back to qa-bot version 1: Healthy." in response.content.decode()
    assert Deployment.objects.get(state="healthy").version == first
    second.refresh_from_db()
    assert second.stage == "deprecated"
    record = AuditRecord.objects.get(event="lifecycle.deployment.rollback")
    assert (record.outcome, record.actor_username, record.reason) == ("success", "olga", "v2 answers worse")


def age(deployment, when, state=None):
    """The row as it would be had it last changed at `when` (updated is set on every save: SQL, not the ORM)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {Deployment._meta.db_table} SET updated = %s, state = %s WHERE id = %s",
                       [when, state or Deployment.objects.get(pk=deployment.pk).state, deployment.pk])


def shown_deployments(html: str) -> list[tuple[str, str]]:
    return re.findall(r'<section class="card deployment-card" id="deployment-(\d+)" data-deployment="[^"]+" '
                      r'data-state="(\w+)">', html)


def test_the_page_shows_current_deployments_and_keeps_the_history_one_click_away(demo, model_root, people):  # noqa: F811
    from datetime import timedelta

    from django.utils import timezone

    from appliance.lifecycle import deployments

    olga, erin, max_ = people["olga"], people["erin"], people["max"]
    first = deployments.deploy(to_production(register(model_root, "qa-bot", 11, user=erin), erin, max_), user=olga)
    second = deployments.deploy(to_production(register(model_root, "qa-bot", 12, user=erin), erin, max_), user=olga)
    chat = deployments.deploy(to_production(register(model_root, "chat", 13, user=erin), erin, max_), user=olga)
    first.refresh_from_db()
    assert (first.state, second.state, chat.state) == ("replaced", "healthy", "healthy")
    client = client_of(olga)
    # Replaced a moment ago: still shown.
    assert shown_deployments(client.get("/models/deployments/").content.decode()) == [
        (str(chat.pk), "healthy"), (str(second.pk), "healthy"), (str(first.pk), "replaced")]

    # A day later the replaced rollout is history; a service whose newest rollout failed stays in view, an
    # older failed rollout of a service that runs again does not.
    long_ago = timezone.now() - timedelta(days=2)
    age(first, long_ago)
    age(chat, long_ago, state="failed")
    html = client.get("/models/deployments/").content.decode()
    assert shown_deployments(html) == [(str(chat.pk), "failed"), (str(second.pk), "healthy")]
    assert '<a href="/models/deployments/?show=all">Show every rollout (1 older one hidden)</a>' in html
    every = client.get("/models/deployments/?show=all").content.decode()
    assert [pk for pk, _ in shown_deployments(every)] == [str(chat.pk), str(second.pk), str(first.pk)]
    assert "Show the current ones only" in every

    age(second, long_ago, state="failed")
    age(first, long_ago, state="failed")
    html = client.get("/models/deployments/").content.decode()
    assert shown_deployments(html) == [(str(chat.pk), "failed"), (str(second.pk), "failed")]


def model_health(html: str, name: str) -> str:
    match = re.search(rf'<tr data-model="{name}">.*?<td data-part="health">(.*?)</td>', html, flags=re.S)
    assert match, f"no row for {name}"
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", match.group(1))).strip()


def test_the_model_list_says_which_models_serve_fail_or_have_changed_files(demo, model_root, people):  # noqa: F811
    from appliance.lifecycle import deployments, integrity

    olga, erin, max_ = people["olga"], people["erin"], people["max"]
    served = deployments.deploy(to_production(register(model_root, "qa-bot", 11, user=erin), erin, max_), user=olga)
    register(model_root, "quiet", 12, user=erin)
    client = client_of(people["vera"])
    html = client.get("/models/").content.decode()
    assert (model_health(html, "qa-bot"), model_health(html, "quiet")) == ("1 serving", "-")

    path = model_root / "quiet" / "s12" / "model.safetensors"
    path.write_bytes(path.read_bytes() + b"\0")
    assert integrity.verify(ModelVersion.objects.get(model__name="quiet"), user=erin).state == "tampered"
    age(served, served.updated, state="failed")
    html = client.get("/models/").content.decode()
    assert model_health(html, "qa-bot") == "1 service failing"
    assert model_health(html, "quiet") == "1 version with changed files"


def test_a_rollback_without_a_reason_is_a_400_naming_the_field(demo, people):  # noqa: F811
    response = client_of(people["olga"]).post("/models/deployments/rollback/", {"service": "qa-bot", "reason": ""})
    assert response.status_code == 400 and error_messages(response)[0].startswith("reason:")


def test_the_model_card_downloads_carry_the_hashes_and_are_recorded(model_root, people):  # noqa: F811
    version = register(model_root, "carded", 13, user=people["erin"])
    shard = version.artifacts.get(path="model.safetensors")
    client = client_of(people["vera"])
    page = client.get("/models/carded/versions/1/").content.decode()
    for form in ("html", "md", "json"):
        assert f'href="/models/carded/versions/1/card.{form}"' in page
    markdown = client.get("/models/carded/versions/1/card.md")
    assert markdown.status_code == 200 and markdown["Content-Type"].startswith("text/markdown")
    assert "attachment" in markdown["Content-Disposition"] and shard.sha256 in markdown.content.decode()
    printable = client.get("/models/carded/versions/1/card.html")
    assert printable["Content-Type"].startswith("text/html") and shard.sha256 in printable.content.decode()
    assert client.get("/models/carded/versions/1/card.json").json()["model"]["name"] == "carded"
    assert client.get("/models/carded/versions/1/card.pdf").status_code == 404
    assert AuditRecord.objects.filter(event="lifecycle.card.export").count() == 3
