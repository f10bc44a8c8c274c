"""The model card ("api" part): what a certifier reads about a version (lineage with dataset hashes,
evaluations, approvals with who and when, every file's SHA-256, the signature and the key that checks it,
the verification, the history), as JSON, Markdown and a standalone printable HTML page, through the API and
`manage.py models card`; every export audited."""

import hashlib
import json
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from appliance.audit.models import AuditRecord
from appliance.lifecycle import cards, services

from .api_support import people  # noqa: F401 (fixtures)
from .registry_support import write_model

pytestmark = pytest.mark.django_db

CARD = "/api/v1/lifecycle/models/llama/versions/1/card/"
WIKI = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@pytest.fixture
def approved(root, people):  # noqa: F811
    """llama v1 registered with a dataset, evaluated, requested by erin and approved by amir."""
    erin, amir = people["erin"], people["amir"]
    version = services.register_version(
        "llama", source=str(write_model(root / "v1")), user=erin, code_revision="9f1c2e0",
        datasets=[{"name": "wiki", "uri": "file:///data/wiki", "sha256": WIKI}], hyperparameters={"lr": 0.0003},
        description="first | cut <script>alert(1)</script>")
    services.transition(version, "validated", user=erin)
    services.transition(version, "staging", user=erin)
    evaluation = services.add_evaluation(version, user=erin, name="mmlu", metrics={"accuracy": 0.61}, passed=True)
    request = services.request_transition(version, "production", user=erin, reason="beats the baseline",
                                          evidence=[evaluation.pk])
    services.approve(request, user=amir, reason="evidence checked")
    version.refresh_from_db()
    return version


def exports():
    return list(AuditRecord.objects.filter(event="lifecycle.card.export").order_by("pk"))


def test_the_card_holds_lineage_approvals_hashes_and_signature(approved, root):  # noqa: F811
    card = cards.card(approved)
    assert card["model"]["name"] == "llama" and card["version"]["number"] == 1
    assert card["version"]["stage"] == "production" and card["version"]["aliases"] == ["production"]
    assert card["datasets"] == [{"name": "wiki", "uri": "file:///data/wiki", "sha256": WIKI}]
    assert card["lineage"]["code_revision"] == "9f1c2e0" and card["lineage"]["hyperparameters"] == {"lr": 0.0003}
    assert [(e["name"], e["metrics"], e["passed"], e["created_by"]) for e in card["evaluations"]] == [
        ("mmlu", {"accuracy": 0.61}, True, "erin")]
    [approval] = card["approvals"]
    assert (approval["requested_by"], approval["decided_by"], approval["state"]) == ("erin", "amir", "approved")
    assert approval["decided"] and approval["decision_reason"] == "evidence checked"
    assert approval["evidence"] == [card["evaluations"][0]["id"]]
    files = {a["path"]: a["sha256"] for a in card["artifacts"]}
    for path in ("config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        assert files[path] == hashlib.sha256((root / "v1" / path).read_bytes()).hexdigest()
    assert card["signature"]["public_key"].startswith("-----BEGIN PUBLIC KEY-----")
    assert isinstance(card["signature"]["bundle"], dict) and card["signature"]["signed"]
    assert [h["stage"] for h in card["history"]["stages"]] == ["registered", "validated", "staging", "production"]
    assert [h["alias"] for h in card["history"]["aliases"]] == ["production"]
    assert exports() == []  # gathering a card is not an export


def test_markdown_and_html_carry_the_hashes_and_escape_what_users_typed(approved):
    card = cards.card(approved)
    sha = card["artifacts"][0]["sha256"]
    markdown = cards.render_markdown(card)
    assert markdown.startswith("# Model card: llama version 1\n")
    for heading in ("## Lineage", "### Datasets", "## Evaluations", "## Approvals", "## Artifacts (3 files",
                    "## Signature", "## Verification", "## Stage history", "## Deployments"):
        assert heading in markdown, heading
    assert sha in markdown and WIKI in markdown and "-----BEGIN PUBLIC KEY-----" in markdown
    assert "first \\| cut \\<script\\>alert(1)\\</script\\>" in markdown
    page = cards.render_html(card, style_nonce="n0nce")
    assert page.startswith("<!DOCTYPE html>") and '<style nonce="n0nce">' in page and "@media print" in page
    assert sha in page and WIKI in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # Standalone: nothing loaded from anywhere, no script.
    assert "<script" not in page.lower() and not re.search(r"\b(src|href)=|url\(|@import", page)


def test_the_api_exports_each_format_and_records_each_export(client, approved, people):  # noqa: F811
    client.force_login(people["aude"])  # an auditor reads cards
    data = client.get(CARD)
    assert data.status_code == 200 and data["Content-Type"] == "application/json"
    assert data.json()["approvals"][0]["decided_by"] == "amir"
    markdown = client.get(CARD, {"format": "md"})
    assert markdown.status_code == 200 and markdown["Content-Type"] == "text/markdown; charset=utf-8"
    assert markdown["Content-Disposition"] == 'attachment; filename="model-card-llama-v1.md"'
    assert markdown.content.decode().startswith("# Model card: llama version 1")
    page = client.get(CARD, {"format": "html"})
    assert page.status_code == 200 and page["Content-Type"] == "text/html; charset=utf-8"
    nonce = re.search(r"'nonce-([A-Za-z0-9_-]+)'", page["Content-Security-Policy"]).group(1)
    assert f'<style nonce="{nonce}">' in page.content.decode()
    assert [(r.details["format"], r.actor_username, r.target_name) for r in exports()] == [
        ("json", "aude", "llama v1"), ("md", "aude", "llama v1"), ("html", "aude", "llama v1")]
    refused = client.get(CARD, {"format": "pdf"})
    assert refused.status_code == 400
    assert refused.json()["error"]["fields"] == {"format": ["format: 'pdf' is not one of json, md, html"]}
    assert client.get("/api/v1/lifecycle/models/llama/versions/2/card/").status_code == 404
    assert len(exports()) == 3


def test_models_card_writes_the_card_by_number_or_alias(approved, tmp_path, capsys):
    call_command("models", "card", "llama", "1", "--format", "json")
    assert json.loads(capsys.readouterr().out)["version"]["number"] == 1
    target = tmp_path / "card.html"
    call_command("models", "card", "llama", "production", "--format", "html", "--output", str(target))
    page = target.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page  # a file: no nonce needed
    assert [(r.details["format"], r.channel) for r in exports()] == [("json", "cli"), ("html", "cli")]
    with pytest.raises(CommandError, match="alias: llama has no alias champion"):
        call_command("models", "card", "llama", "champion")
    with pytest.raises(CommandError, match="model llama has no version 5"):
        call_command("models", "card", "llama", "5")
    assert len(exports()) == 2


def test_a_viewer_downloads_nothing_without_signing_in(approved):
    assert Client().get(CARD).status_code == 401
    assert exports() == []
