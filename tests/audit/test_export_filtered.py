"""Auditors export what they filtered: the log page's filter reaches the export in the portal, the API
and `manage.py audit export`; the manifest states it; the bundle verifies offline (each record
proven against a signed checkpoint) and fails when a record in it is changed."""

import io
import json
import zipfile
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from appliance import audit
from appliance.audit import chain, signing
from appliance.audit.models import AuditRecord
from appliance.audit.queries import AuditRecordFilter, select_records
from appliance.audit.verify import FILTER_MATCHES, MODIFIED, verify_bundle
from appliance.core import context
from appliance.core.roles import Role

pytestmark = pytest.mark.django_db


@pytest.fixture
def mixed_log(users):
    """Records by two people, interleaved, a few failed: {"operator": [sequences], ...}."""
    made = {"operator": [], "administrator": [], "failed": []}
    for round_number in range(6):
        with context.acting_as(users[Role.OPERATOR], channel="web"):
            made["operator"].append(audit.record("task.run", target_type="task", target_id=f"op-{round_number}",
                                                 target_name=f"Rack A job {round_number}").sequence)
        with context.acting_as(users[Role.ADMINISTRATOR], channel="api"):
            outcome = "failure" if round_number % 2 else "success"
            record = audit.record("task.run", target_type="task", target_id=f"ad-{round_number}",
                                  target_name=f"rack b job {round_number}", outcome=outcome,
                                  reason="exit 1" if outcome == "failure" else "")
            made["administrator"].append(record.sequence)
            if outcome == "failure":
                made["failed"].append(record.sequence)
    with context.acting_as(users[Role.OPERATOR], channel="web"):
        made["operator"].append(audit.record("inventory.site.import", target_name="site.yml").sequence)
    return made


def unzip(response, tmp_path) -> Path:
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    archive.extractall(tmp_path / "download")
    [bundle] = (tmp_path / "download").iterdir()
    return bundle


def sequences_in(bundle: Path) -> list[int]:
    return [json.loads(line)["record"]["sequence"] for line in (bundle / "records.jsonl").read_bytes().splitlines()]


def manifest_of(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


def test_portal_export_carries_the_log_filter_and_holds_exactly_those_records(client_for, mixed_log, tmp_path):
    auditor = client_for(Role.AUDITOR)
    page = auditor.get("/audit/", {"actor": "operator-user"})
    assert [r.sequence for r in page.context["page"].records] == sorted(mixed_log["operator"], reverse=True)
    html = page.content.decode()
    assert 'href="/audit/export/?actor=operator-user" data-testid="export-filtered"' in html

    form = auditor.get("/audit/export/", {"actor": "operator-user"})
    assert form.status_code == 200
    text = form.content.decode()
    assert 'data-count="7"' in text and "actor=operator-user" in text
    assert form.context["filter_form"]["actor"].value() == "operator-user"

    response = auditor.post("/audit/export/", {"format": "jsonl", "actor": "operator-user", "event": ""})
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    bundle = unzip(response, tmp_path)
    assert sequences_in(bundle) == mixed_log["operator"]
    manifest = manifest_of(bundle)
    assert manifest["filter"] == {"actor": "operator-user"}
    assert manifest["selection"]["count"] == 7
    assert sorted(p.name for p in bundle.iterdir()) == ["manifest.json", "proofs.jsonl", "public-key.pem",
                                                        "records.jsonl"]
    result = verify_bundle(bundle)
    assert result.ok, result.summary()
    assert result.selection and result.records == 7
    assert "a selection of 7 records" in result.summary() and "actor=operator-user" in result.summary()
    exported = AuditRecord.objects.filter(event="audit.export").latest("sequence")
    assert exported.details["filter"] == {"actor": "operator-user"} and exported.details["kind"] == "selection"
    assert exported.details["count"] == 7


def test_the_timeline_export_link_names_its_user(client_for, mixed_log):
    page = client_for(Role.AUDITOR).get("/audit/users/operator-user/", {"event": "task.*"})
    assert 'href="/audit/export/?event=task.%2A&amp;actor=operator-user"' in page.content.decode()


def test_a_time_that_does_not_exist_in_utc_is_refused_by_name(client_for, mixed_log):
    page = client_for(Role.AUDITOR).get("/audit/", {"until": "9999-12-31T23:59:59-05:00"})
    assert page.status_code == 200 and page.context["page"] is None
    assert page.context["form"].errors["until"] == ["Enter a time between the years 1 and 9999 in UTC."]


def test_portal_export_refuses_a_bad_filter_naming_it(client_for, mixed_log):
    response = client_for(Role.AUDITOR).post("/audit/export/", {"format": "jsonl", "actor_id": "seven"})
    assert response.status_code == 400
    assert "actor_id: Enter a whole number in ASCII digits." in response.content.decode()
    assert not AuditRecord.objects.filter(event="audit.export").exists()


def test_api_export_applies_every_filter_given(client_for, mixed_log, tmp_path):
    response = client_for(Role.AUDITOR).post(
        "/api/v1/audit/exports/", {"format": "csv", "actor": "administrator-user", "outcome": "failure",
                                "event": "task.*", "target": "RACK B"}, content_type="application/json")
    assert response.status_code == 200, response.content
    bundle = unzip(response, tmp_path)
    assert sequences_in(bundle) == mixed_log["failed"]
    csv_rows = (bundle / "records.csv").read_text().splitlines()
    assert len(csv_rows) == 1 + 3
    assert manifest_of(bundle)["filter"] == {"actor": "administrator-user", "event": "task.*",
                                             "outcome": "failure", "target": "RACK B"}
    assert verify_bundle(bundle).ok


@pytest.mark.parametrize("body, field", [
    ({"actor_id": "x"}, "actor_id"),
    ({"outcome": "maybe"}, "outcome"),
    ({"actr": "operator-user"}, "actr"),
    ({"since": "2030-01-02T00:00:00Z", "until": "2030-01-01T00:00:00Z"}, "until"),
    ({"since": "0001-01-01T00:00:00+05:00"}, "since"),
])
def test_api_export_refuses_a_bad_filter_naming_the_parameter(client_for, mixed_log, body, field):
    response = client_for(Role.AUDITOR).post("/api/v1/audit/exports/", {"format": "jsonl", **body},
                                             content_type="application/json")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == [field]


def test_api_export_of_a_filter_that_matches_nothing_says_so(client_for, mixed_log):
    response = client_for(Role.AUDITOR).post("/api/v1/audit/exports/", {"format": "jsonl", "actor": "nobody"},
                                             content_type="application/json")
    assert response.status_code == 400
    assert "no records that match the filter (actor=nobody)" in response.json()["error"]["message"]


def test_cli_export_applies_the_filter_and_states_it(mixed_log, tmp_path, capsys):
    out = tmp_path / "failed"
    call_command("audit", "export", "--format", "syslog", "--out", str(out), "--outcome", "failure",
                 "--actor", "administrator-user")
    printed = capsys.readouterr().out
    assert f"({len(mixed_log['failed'])}) matching actor=administrator-user, outcome=failure" in printed
    assert sequences_in(out) == mixed_log["failed"]
    assert len((out / "records.log").read_text().splitlines()) == 3
    assert manifest_of(out)["filter"] == {"actor": "administrator-user", "outcome": "failure"}
    call_command("audit", "keys", "export", "--out", str(tmp_path / "keys.json"))
    capsys.readouterr()
    call_command("audit", "verify", str(out), "--key-list", str(tmp_path / "keys.json"))
    verified = capsys.readouterr().out
    assert verified.startswith(f"intact: a selection of 3 records (#{mixed_log['failed'][0]}..#"
                               f"{mixed_log['failed'][-1]}) matching actor=administrator-user, outcome=failure, "
                               "each proven included in signed checkpoint #")
    assert "that it holds every matching record only the live log can show" in verified


def test_cli_export_refuses_a_bad_filter_naming_the_option(mixed_log, tmp_path):
    with pytest.raises(CommandError) as refused:
        call_command("audit", "export", "--format", "jsonl", "--out", str(tmp_path / "b"), "--actor-id", "abc")
    assert str(refused.value) == "--actor-id: Enter a whole number in ASCII digits."
    with pytest.raises(CommandError) as refused:
        call_command("audit", "export", "--format", "jsonl", "--out", str(tmp_path / "b"), "--channel", "pigeon")
    assert str(refused.value).startswith("--channel: Select a valid choice. pigeon is not one of")
    assert not (tmp_path / "b").exists()


def test_a_time_filter_alone_still_exports_the_contiguous_range(mixed_log, tmp_path):
    records = list(AuditRecord.objects.order_by("sequence"))
    since = records[2].timestamp
    until = records[-1].timestamp
    call_command("audit", "export", "--format", "jsonl", "--out", str(tmp_path / "window"),
                 "--since", since.isoformat(), "--until", until.isoformat())
    manifest = manifest_of(tmp_path / "window")
    assert "selection" not in manifest
    assert (manifest["range"]["first_sequence"], manifest["range"]["last_sequence"]) == (
        records[2].sequence, records[-2].sequence)
    assert manifest["filter"] == {"since": chain.format_timestamp(since), "until": chain.format_timestamp(until)}
    result = verify_bundle(tmp_path / "window")
    assert result.ok and not result.selection
    assert f"matching since={chain.format_timestamp(since)}" in result.summary()


@pytest.fixture
def operator_bundle(mixed_log, tmp_path):
    out = tmp_path / "operator"
    call_command("audit", "export", "--format", "jsonl", "--out", str(out), "--actor", "operator-user")
    assert verify_bundle(out).ok
    return out


def rewrite_line(bundle: Path, index: int, change) -> int:
    path = bundle / "records.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    entry = json.loads(lines[index])
    change(entry)
    lines[index] = chain.export_line(chain.canonical(entry["record"]), entry["hash"])
    path.write_bytes(b"".join(lines))
    return entry["record"]["sequence"]


def test_a_changed_record_in_a_filtered_bundle_fails(operator_bundle, mixed_log):
    def rename(entry):
        entry["record"]["target"]["name"] = "Rack Z job 2"

    sequence = rewrite_line(operator_bundle, 2, rename)
    result = verify_bundle(operator_bundle)
    assert not result.ok
    assert (result.first.kind, result.first.sequence) == (MODIFIED, mixed_log["operator"][2]) == (MODIFIED, sequence)
    assert result.first.message == "the record's bytes do not match its hash"


def test_a_changed_record_with_its_hash_recomputed_fails_its_inclusion_proof(operator_bundle, mixed_log):
    def rename_and_rehash(entry):
        entry["record"]["target"]["name"] = "Rack Z job 3"
        entry["hash"] = chain.record_hash(entry["record"])

    sequence = rewrite_line(operator_bundle, 3, rename_and_rehash)
    result = verify_bundle(operator_bundle)
    assert not result.ok and result.first.kind == MODIFIED and result.first.sequence == mixed_log["operator"][3]
    assert result.first.message.startswith(f"record #{sequence} is not included in signed checkpoint #")


def test_a_record_removed_from_a_filtered_bundle_fails(operator_bundle, mixed_log):
    path = operator_bundle / "records.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:1] + lines[2:]))
    result = verify_bundle(operator_bundle)
    assert not result.ok and (result.first.kind, result.first.sequence) == ("deleted", mixed_log["operator"][1])


def test_records_that_do_not_match_the_stated_filter_fail(operator_bundle):
    # Even re-signed with the audit key itself, a manifest may not claim a filter its records miss.
    manifest = manifest_of(operator_bundle)
    manifest["filter"] = {"actor": "administrator-user"}
    del manifest["signature"]
    manifest["signature"] = signing.load_signing_key().sign(chain.signed_statement(manifest))
    (operator_bundle / "manifest.json").write_text(json.dumps(manifest))
    result = verify_bundle(operator_bundle)
    assert not result.ok and result.first.kind == "inserted"
    assert "does not match the manifest's filter actor=administrator-user" in result.first.message


def test_the_offline_filter_answers_as_the_log_filter_does(mixed_log, users):
    assert set(FILTER_MATCHES) == set(AuditRecordFilter.base_filters)
    middle = AuditRecord.objects.get(sequence=mixed_log["operator"][3]).timestamp
    samples = [{"actor": "operator-user"}, {"actor_id": str(users[Role.ADMINISTRATOR].pk)}, {"event": "task.*"},
               {"event": "inventory."}, {"event": "task.run"}, {"action": "run"}, {"category": "operation"},
               {"target_type": "task"}, {"target_id": "op-4"}, {"target": "RACK"}, {"outcome": "failure"},
               {"channel": "api"}, {"request_id": "none"}, {"since": middle.isoformat()},
               {"until": middle.isoformat()}, {"since": (middle - timedelta(microseconds=1)).isoformat(),
                                               "until": (middle + timedelta(microseconds=1)).isoformat()}]
    assert {name for sample in samples for name in sample} == set(AuditRecordFilter.base_filters)
    for sample in samples:
        selection = select_records(sample)
        by_database = set(selection.queryset.values_list("sequence", flat=True))
        offline = {record.sequence for record in AuditRecord.objects.all()
                   if all(FILTER_MATCHES[name](record.payload(), value) for name, value in selection.filters.items())}
        assert by_database == offline, sample
