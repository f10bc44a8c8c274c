"""manage.py models deploy / models rollback ("deploy" part): as the account whose token is in
APPLIANCE_TOKEN, exit status 0 for a healthy service, 1 for a refusal with one line naming the field."""

from io import StringIO

import pytest
from django.core.management import call_command

from appliance.accounts import tokens
from appliance.audit.models import AuditRecord
from appliance.lifecycle.models import Deployment, StageHistory

from .deploy_support import demo, people, production  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


def models(*arguments) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("models", *arguments, stdout=out, stderr=err)
        status = 0
    except SystemExit as exc:
        status = exc.code
    return status, out.getvalue(), err.getvalue()


def test_deploy_and_rollback_from_the_command_line(demo, root, people, monkeypatch):  # noqa: F811
    production(root, people, "v1", 7)
    monkeypatch.setenv("APPLIANCE_TOKEN", tokens.issue_token(people["olga"], "cli")[1])
    status, out, err = models("deploy", "llama", "--runtime", "nim")
    assert (status, err) == (0, "")
    first = Deployment.objects.get()   # its number is the database's (sequences outlive a test)
    assert out.startswith(f"deployment {first.pk}: llama = llama v1 (nim) on gpu04/gpu0: healthy")
    production(root, people, "v2", 8)
    status, out, _ = models("deploy", "llama", "--version", "2")
    assert status == 0 and "llama = llama v2 (vllm) on gpu04/gpu1: healthy" in out
    status, out, _ = models("rollback", "llama", "--reason", "latency doubled")
    assert status == 0 and "llama = llama v1 (nim) on gpu04/gpu0: healthy" in out
    assert list(Deployment.objects.order_by("pk").values_list("state", flat=True)) == ["replaced", "replaced",
                                                                                       "healthy"]
    record = AuditRecord.objects.filter(event="lifecycle.deployment.rollback").last()
    assert (record.actor_username, record.channel, record.reason) == ("olga", "cli", "latency doubled")
    # The history says why each version moved: the request's reason, the approval's replacement, the rollback's.
    lines = [line.split(None, 2)[2] for line in models("history", "llama")[1].splitlines()
             if " -> production" in line or " -> deprecated" in line]
    request = StageHistory.objects.get(version__number=2, stage="production").request_id
    assert lines == ["v1 -> production: evaluated", "v2 -> production: evaluated",
                     f"v1 -> deprecated: replaced in production by v2 (request #{request})",
                     "v2 -> deprecated: rolled back: latency doubled", "v1 -> production: rolled back: latency doubled"]


def test_refusals_are_one_line_naming_the_field(demo, root, people, monkeypatch):  # noqa: F811
    production(root, people, "v1", 7)
    monkeypatch.setenv("APPLIANCE_TOKEN", tokens.issue_token(people["olga"], "cli")[1])
    status, _, err = models("deploy", "llama", "--service-name", "llama;id")
    assert status == 1 and err.startswith("error: name: 'llama;id' is not a service name")
    status, _, err = models("rollback", "llama", "--reason", "nothing to go back to")
    assert status == 1 and err.startswith("error: name: no service llama is deployed")
    monkeypatch.setenv("APPLIANCE_TOKEN", tokens.issue_token(people["val"], "cli")[1])
    status, _, err = models("deploy", "llama")
    assert status == 1 and "val may not deploy models" in err
    assert not Deployment.objects.exists()


def test_a_tampered_version_is_not_deployed_from_the_command_line(demo, root, people, monkeypatch):  # noqa: F811
    """The issue's attack (the last 8 bytes of a shard rewritten in place, the mtime put back to the
    nanosecond), with even the recorded stat brought up to the file's, so that no stat can tell: `models deploy`
    is refused in one line naming the file (exit status 1), the deployment is blocked, and it stays refused
    once the bytes are back (the verdict stands until an Administrator clears it)."""
    from .integrity_support import put_back, rewrite_last_bytes

    version = production(root, people, "v1", 7)
    shard = root / "v1" / "model-00002-of-00002.safetensors"
    original = rewrite_last_bytes(shard)
    info = shard.stat()
    version.artifacts.filter(path=shard.name).update(mtime_ns=info.st_mtime_ns, inode=info.st_ino,
                                                     ctime_ns=info.st_ctime_ns)
    monkeypatch.setenv("APPLIANCE_TOKEN", tokens.issue_token(people["olga"], "cli")[1])
    status, out, err = models("deploy", "llama")
    assert (status, out) == (1, "")
    assert err.startswith("error: version: llama v1 is not what was registered and signed (changed: "
                          "model-00002-of-00002.safetensors); it may not be deployed")
    put_back(shard, original)
    status, _, err = models("deploy", "llama")
    assert status == 1 and "the verdict stands until an Administrator clears it" in err
    assert list(Deployment.objects.values_list("state", flat=True)) == ["blocked", "blocked"]
    version.refresh_from_db()
    assert version.verification == "tampered"
    assert [(r.outcome, r.channel, r.details["integrity"]) for r in AuditRecord.objects.filter(
        event="lifecycle.deployment.create").order_by("sequence")] == [("failure", "cli", "full"),
                                                                        ("failure", "cli", "full")]
