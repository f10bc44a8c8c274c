"""Export bundles: contents, and each format read back by an independent parser."""

import csv
import io
import json
from datetime import timedelta

import pycef
import pytest
from django.core.management import call_command
from django.utils import timezone
from py_ocsf_models.events.base_event import BaseEvent
from syslog_rfc5424_parser import SyslogMessage

from appliance.accounts.models import User
from appliance.audit import catalogue, chain, signing
from appliance.audit.export import ExportError, export_bundle
from appliance.audit.models import AuditRecord
from appliance.audit.verify import verify_bundle
from tests.audit import ocsf_schema

pytestmark = pytest.mark.django_db


def canonical_records(bundle):
    return [json.loads(line) for line in (bundle / "records.jsonl").read_bytes().splitlines()]


def cef_unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        if value[i] == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            out.append({"n": "\n", "r": "\r"}.get(nxt, nxt))
            i += 2
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


@pytest.fixture
def session_bundle(real_session, tmp_path):
    def export(fmt, **kwargs):
        out = tmp_path / f"bundle-{fmt}"
        manifest = export_bundle(out, fmt, **kwargs)
        return out, manifest

    return export


def test_bundle_holds_records_manifest_and_key_and_verifies(session_bundle):
    bundle, manifest = session_bundle("jsonl")
    assert sorted(p.name for p in bundle.iterdir()) == ["manifest.json", "public-key.pem", "records.jsonl"]
    records = canonical_records(bundle)
    span = manifest["range"]
    assert span["count"] == len(records) == span["last_sequence"] - span["first_sequence"] + 1
    assert records[0]["record"]["prev_hash"] == chain.GENESIS_HASH == span["first_prev_hash"]
    assert (span["first_hash"], span["last_hash"]) == (records[0]["hash"], records[-1]["hash"])
    assert manifest["key_id"] == signing.load_signing_key().key_id
    assert manifest["checkpoints"] and all(c["signature"] for c in manifest["checkpoints"])
    assert manifest["tree"]["checkpoint_tree_size"] >= span["last_sequence"]
    events = {r["record"]["event"] for r in records}
    assert {"auth.login.failure", "auth.login.success", "inventory.site.import"} <= events
    result = verify_bundle(bundle)
    assert result.ok, result.summary()
    exported = AuditRecord.objects.filter(event="audit.export").get()
    assert exported.details["last_sequence"] == span["last_sequence"] and exported.sequence > span["last_sequence"]


def test_a_time_window_exports_a_contiguous_range_that_verifies_against_later_checkpoints(session_bundle):
    records = list(AuditRecord.objects.order_by("sequence"))
    since, until = records[3].timestamp, records[-3].timestamp
    bundle, manifest = session_bundle("jsonl", since=since, until=until)
    assert manifest["range"]["first_sequence"] == records[3].sequence
    assert manifest["range"]["last_sequence"] == records[-4].sequence
    tree = manifest["tree"]
    assert bool(tree["consistency_proof"]) == (tree["checkpoint_tree_size"] > tree["size"])
    assert verify_bundle(bundle).ok


def test_a_range_ending_between_checkpoints_carries_a_consistency_proof(session_bundle):
    from appliance.audit.models import AuditCheckpoint

    sizes = set(AuditCheckpoint.objects.values_list("tree_size", flat=True))
    stamps = dict(AuditRecord.objects.values_list("sequence", "timestamp"))
    # A time window ends between two records stamped apart (records written together by a batch
    # share their time); take the last such place that is not itself a checkpoint.
    last = max(seq for seq in stamps if seq + 1 in stamps and stamps[seq + 1] > stamps[seq] and seq not in sizes
               and any(size > seq for size in sizes))
    bundle, manifest = session_bundle("jsonl", until=stamps[last + 1])
    assert manifest["range"]["last_sequence"] == last
    covering = min(size for size in sizes if size > last)
    assert manifest["tree"]["checkpoint_tree_size"] == covering and manifest["tree"]["consistency_proof"]
    assert verify_bundle(bundle).ok


def test_cef_lines_parse_with_pycef_and_keep_every_value(session_bundle):
    bundle, _ = session_bundle("cef")
    records = canonical_records(bundle)
    lines = (bundle / "records.cef").read_text().splitlines()
    assert len(lines) == len(records)
    for line, entry in zip(lines, records, strict=True):
        record = entry["record"]
        parsed = pycef.parse(line)
        assert parsed is not None, line
        assert parsed["DeviceEventClassID"] == record["event"]
        assert parsed["DeviceVendor"] == "AI Appliance" and parsed["CEFVersion"] == "0"
        assert cef_unescape(parsed["sequence"]) == str(record["sequence"])
        assert cef_unescape(parsed["hash"]) == entry["hash"]
        if "cs5" in parsed.get("truncated", "").split(","):
            assert parsed["details"].endswith("; the full value is in records.jsonl]")
            assert len(parsed["details"]) <= 4000
        else:
            assert json.loads(cef_unescape(parsed["details"])) == record["details"]
        assert cef_unescape(parsed["outcome"]) == record["outcome"]
    failed = pycef.parse(lines[next(i for i, e in enumerate(records) if e["record"]["event"] == "auth.login.failure")])
    # The attempted username, where SIEM rules on failed logins look for it.
    assert (failed["suser"], failed["duser"], failed["src"]) == ("alice", "alice", "192.0.2.10")
    tricky = next(e for e in records if "Rack" in json.dumps(e["record"]["details"]))
    line = lines[records.index(tricky)]
    assert '\\=' in line and "\\\\" in line  # '=' and '\' escaped in the extension


def test_cef_escaping_follows_arcsight_rules():
    from appliance.audit.export.formats import cef_extension_escape, cef_header_escape

    assert cef_header_escape("a|b\\c") == "a\\|b\\\\c"
    assert cef_extension_escape("a=b\\c\nd\re|f") == "a\\=b\\\\c\\nd\\re|f"
    # CEF has no escape for other control characters or Unicode line separators: they are replaced.
    assert cef_extension_escape("a\x00b\x0bc\x85d\u2028e") == "a\ufffdb\ufffdc\ufffdd\ufffde"
    assert cef_header_escape("a\nb\x85c") == "a b c"


def test_cef_puts_an_ipv6_source_in_c6a2_and_an_ipv4_mapped_one_in_src():
    from appliance.audit.export.formats import Cef

    line = Cef().line(_payload("api.request", **ACTORS["administrator over IPv6"]), "a" * 64, _context()).decode()
    parsed = pycef.parse(line)
    # CEF:0's src holds an IPv4 address only.
    assert parsed["Source IPv6 Address"] == "2001:db8::7" and "src" not in parsed
    assert " c6a2=2001:db8::7 c6a2Label=Source IPv6 Address" in line
    mapped = Cef().line(_payload("api.request", source="::ffff:192.0.2.5"), "a" * 64, _context()).decode()
    assert pycef.parse(mapped)["src"] == "192.0.2.5" and "c6a2" not in mapped
    named = Cef().line(_payload("api.request", source="console"), "a" * 64, _context()).decode()
    assert pycef.parse(named)["shost"] == "console"


def test_cef_cuts_a_long_value_to_arcsights_limit_and_says_so(db, tmp_path):
    from appliance import audit

    long_details = {"nodes": [{"name": f"gpu{i:03d}", "note": "a=b\\c\n" * 20} for i in range(120)]}
    audit.record("inventory.site.import", target_type="inventory.appliance", target_id="1", target_name="demo",
                 reason="r" * 3000, details=long_details)
    export_bundle(tmp_path / "b", "cef")
    [line] = [line for line in (tmp_path / "b" / "records.cef").read_text().splitlines() if "site.import" in line]
    parsed = pycef.parse(line)
    head_fields = 8
    extension = {key: value for key, value in list(parsed.items())[head_fields:]}
    assert max(len(value) for value in extension.values()) <= 4000
    assert parsed["truncated"] == "reason,cs5"
    assert len(parsed["details"]) == 4000 and parsed["details"].endswith(
        f"...[truncated: {len(json.dumps(long_details, sort_keys=True, separators=(',', ':')))} characters; "
        "the full value is in records.jsonl]")
    assert len(parsed["reason"]) <= 1023 and parsed["reason"].startswith("rrrr")
    assert not parsed["details"][:-80].endswith("\\")  # never cut inside an escape
    [full] = [r for r in canonical_records(tmp_path / "b") if r["record"]["event"] == "inventory.site.import"]
    assert full["record"]["details"] == long_details and full["record"]["reason"] == "r" * 3000
    assert verify_bundle(tmp_path / "b").ok


# A second syslog line, if the newline got through. Under 64 characters, the shortest column it goes
# into; no NUL, which PostgreSQL text cannot hold (the escaping functions' own tests cover it).
FORGING = "admin\nforged\r<13>1 - host app - - - fake\u2028x\x85y\x0bz\x1f"


@pytest.mark.parametrize("fmt", ["syslog", "cef", "ocsf"])
def test_control_characters_in_any_field_never_make_a_second_line(db, tmp_path, fmt):
    from appliance import audit
    from appliance.core import context

    forged_context = context.ActionContext(channel="web", actor_username=FORGING, source_address=FORGING,
                                           user_agent=FORGING, request_id=FORGING)
    with context.use(forged_context):
        audit.record("api.request", outcome="failure", reason=FORGING, target_type=FORGING, target_id=FORGING,
                     target_name=FORGING, details={FORGING: FORGING})
    audit.record("task.run")
    bundle = tmp_path / fmt
    manifest = export_bundle(bundle, fmt)
    data = (bundle / manifest["files"]["display"]["name"]).read_bytes()
    records = canonical_records(bundle)
    assert len(data.splitlines()) == len(data.decode().splitlines()) == len(records)
    line = data.decode().splitlines()[[r["record"]["event"] for r in records].index("api.request")]
    if fmt == "syslog":
        message = SyslogMessage.parse(line)
        assert message.sd["audit@32473"]["actor"] == (
            "admin\\u000aforged\\u000d<13>1 - host app - - - fake\\u2028x\\u0085y\\u000bz\\u001f")
        assert json.loads(message.msg.lstrip("\ufeff"))["actor"]["username"] == FORGING
    elif fmt == "cef":
        assert pycef.parse(line)["suser"] == (
            "admin\\nforged\\r<13>1 - host app - - - fake\ufffdx\ufffdy\ufffdz\ufffd")
    else:
        assert json.loads(line)["actor"]["user"]["name"] == FORGING
    assert verify_bundle(bundle).ok


def test_syslog_lines_parse_as_rfc5424_with_structured_data(session_bundle):
    bundle, _ = session_bundle("syslog")
    records = canonical_records(bundle)
    lines = (bundle / "records.log").read_bytes().splitlines()
    assert len(lines) == len(records)
    for raw, entry in zip(lines, records, strict=True):
        message = SyslogMessage.parse(raw.decode("utf-8"))
        data = message.sd["audit@32473"]
        assert data["seq"] == str(entry["record"]["sequence"]) and data["hash"] == entry["hash"]
        assert data["event"] == entry["record"]["event"]
        assert message.facility.value == 13 and message.appname == "appliance-audit"
        assert json.loads(message.msg.lstrip("\ufeff")) == entry["record"]


def test_sd_param_values_escape_quote_backslash_and_bracket():
    from appliance.audit.export.formats import sd_param_escape

    value = 'say "hi" \\ [x]'
    escaped = sd_param_escape(value)
    assert escaped == 'say \\"hi\\" \\\\ [x\\]'
    assert sd_param_escape("a\x00b\nc\x85d\u2029\\u000a") == "a\\u0000b\\u000ac\\u0085d\\u2029\\\\u000a"
    line = f'<110>1 2026-01-01T00:00:00.000000Z host app - id [x@32473 v="{escaped}"] msg'
    parsed = SyslogMessage.parse(line).sd["x@32473"]["v"]  # the parser keeps the escapes; undo them
    assert parsed.replace('\\"', '"').replace("\\]", "]").replace("\\\\", "\\") == value


def test_ocsf_events_validate_and_use_each_events_catalogue_class(session_bundle):
    bundle, _ = session_bundle("ocsf")
    records = canonical_records(bundle)
    events = [json.loads(line) for line in (bundle / "records.ocsf.jsonl").read_text().splitlines()]
    assert len(events) == len(records)
    for event, entry in zip(events, records, strict=True):
        record = entry["record"]
        BaseEvent.model_validate(event)
        assert ocsf_schema.problems_of(event) == [], (record["event"], event)
        event_type = catalogue.get(record["event"])
        assert event["class_uid"] == event_type.ocsf_class and event["activity_id"] == event_type.ocsf_activity
        assert event["time"] == int(chain.parse_timestamp(record["timestamp"]).timestamp() * 1000)
        if record["actor"]["username"]:
            assert event["actor"]["user"]["name"] == record["actor"]["username"]
        else:
            assert event["actor"]["user"] == {"uid": "anonymous", "type_id": 99, "type": "Unauthenticated"}
        assert event["metadata"]["product"]["name"] and event["metadata"]["version"] == "1.1.0"
        assert event["unmapped"]["hash"] == entry["hash"]
        assert event["status"] == ("Success" if record["outcome"] == "success" else "Failure")
    login = next(e for e, r in zip(events, records, strict=True) if r["record"]["event"] == "auth.login.failure")
    assert login["class_uid"] == 3002 and login["src_endpoint"] == {"ip": "192.0.2.10"}
    # The account the failed login tried, where OCSF puts it: the authentication's user.
    assert login["user"] == {"name": "alice", "uid": str(User.objects.get(username="alice").pk)}
    assert login["status_detail"] == "invalid credentials"


def test_csv_reads_back_with_the_csv_module(session_bundle):
    bundle, _ = session_bundle("csv")
    records = canonical_records(bundle)
    rows = list(csv.DictReader(io.StringIO((bundle / "records.csv").read_text(), newline="")))
    assert len(rows) == len(records)
    for row, entry in zip(rows, records, strict=True):
        assert int(row["sequence"]) == entry["record"]["sequence"] and row["hash"] == entry["hash"]
        assert json.loads(row["details"]) == entry["record"]["details"]


def test_csv_cells_that_look_like_formulas_are_defused():
    from appliance.audit.export.formats import _cell

    assert _cell("=HYPERLINK(1)") == "'=HYPERLINK(1)" and _cell("plain") == "plain"


@pytest.mark.parametrize("fmt", ["cef", "syslog", "ocsf", "csv"])
def test_every_display_format_comes_with_the_canonical_records_and_verifies(session_bundle, fmt):
    bundle, manifest = session_bundle(fmt)
    assert (bundle / "records.jsonl").exists() and manifest["files"]["display"]["name"] != "records.jsonl"
    assert verify_bundle(bundle).ok


def test_export_refuses_bad_requests_and_leaves_nothing(db, tmp_path):
    from appliance import audit

    audit.record("task.run")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(ExportError, match="not an empty directory"):
        export_bundle(tmp_path / "full", "jsonl")
    with pytest.raises(ExportError, match="format"):
        export_bundle(tmp_path / "b", "xml")
    future = timezone.now() + timedelta(days=1)
    with pytest.raises(ExportError, match="no records"):
        export_bundle(tmp_path / "b", "jsonl", since=future)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full", "keys"]


def test_the_command_writes_a_bundle(db, tmp_path, capsys):
    from appliance import audit

    for _ in range(3):
        audit.record("task.run")
    call_command("audit", "export", "--format", "syslog", "--out", str(tmp_path / "b"))
    assert "exported records #1.." in capsys.readouterr().out
    assert verify_bundle(tmp_path / "b").ok


# -- OCSF 1.1.0: every event type, every kind of actor and source, against the schema's own data ------

def _payload(event, *, actor=None, source="", user_agent="", target=None, details=None, request_id="req-1",
             channel="web", outcome="success", reason=""):
    event_type = catalogue.get(event)
    return {
        "sequence": 7, "uuid": "5f0c3a52-8a43-4f7e-9a1c-2b1d0c9e8f77", "timestamp": "2026-03-01T10:00:00.000000Z",
        "event": event, "category": event_type.category, "severity": event_type.severity,
        "actor": actor or {"id": None, "username": "", "roles": []}, "channel": channel,
        "source_address": source, "user_agent": user_agent, "request_id": request_id,
        "action": event_type.action, "target": target or {"type": "", "id": "", "name": ""},
        "outcome": outcome, "reason": reason, "details": details or {}, "prev_hash": "0" * 64,
    }


ACTORS = {
    "anonymous web client": dict(actor={"id": None, "username": "", "roles": []}, source="192.0.2.10",
                                 user_agent="Mozilla/5.0", channel="web"),
    "administrator over IPv6": dict(actor={"id": 1, "username": "alice", "roles": ["administrator"]},
                                    source="2001:db8::7", user_agent="curl/8.5", channel="api"),
    "operator": dict(actor={"id": 4, "username": "oscar", "roles": ["operator"]}, source="192.0.2.11", channel="web"),
    "OS account at the console": dict(actor={"id": None, "username": "root", "roles": []}, channel="cli",
                                      request_id="cli-3c9d"),
    "scheduled task": dict(actor={"id": None, "username": "celery", "roles": []}, channel="task", request_id=""),
}
TARGETS = {
    "none": None,
    "a user account": {"type": "accounts.user", "id": "3", "name": "victor"},
    "a node": {"type": "inventory.node", "id": "12", "name": "gpu01"},
    "a command": {"type": "command", "id": "", "name": "create_admin"},
}


def _context():
    from appliance.audit.export import _describe_event
    from appliance.audit.export.formats import ExportContext

    return ExportContext(product_version="0.1.0", host="mgmt01", resolve=_describe_event)


@pytest.mark.parametrize("actor", sorted(ACTORS))
def test_every_catalogue_event_is_valid_ocsf_1_1_0_for_every_kind_of_actor_and_target(actor):
    from appliance.audit.export.formats import Ocsf

    context, problems = _context(), {}
    details = {"method": "PATCH", "path": "/api/v1/inventory/nodes/12/", "status": 200, "view": "node-detail",
               "role": ["viewer", "operator"], "command": "create_admin", "argv": ["--username", "x y"]}
    for name in sorted(catalogue.CATALOGUE):
        for target_name, target in TARGETS.items():
            payload = _payload(name, target=target, details=details, **ACTORS[actor])
            found = ocsf_schema.problems_of(Ocsf().event(payload, "a" * 64, context))
            if found:
                problems[f"{name} / {target_name}"] = found
    assert problems == {}


def test_every_catalogue_class_and_activity_is_in_the_ocsf_1_1_0_schema():
    classes = ocsf_schema.schema()["classes"]
    wrong = {}
    for name, event_type in catalogue.CATALOGUE.items():
        definition = classes.get(str(event_type.ocsf_class))
        if definition is None:
            wrong[name] = f"class {event_type.ocsf_class} is not in tests/audit/data/ocsf-1.1.0.json"
        elif str(event_type.ocsf_activity) not in definition["attributes"]["activity_id"]["enum"]:
            wrong[name] = f"activity {event_type.ocsf_activity} is not one of {definition['name']}'s"
        elif event_type.ocsf_class_name != definition["caption"]:
            wrong[name] = f"class name {event_type.ocsf_class_name!r} is not {definition['caption']!r}"
    assert wrong == {}


def test_datastore_activities_use_the_ocsf_1_1_0_activity_ids():
    # Datastore Activity (6005) in OCSF 1.1.0: 1 Read, 2 Update, 3 Connect, 4 Query, 5 Write, 6 Create, 7 Delete.
    # Nothing here records a connection to a datastore, so no event is a Connect. A new Datastore
    # Activity event is added here with the operation it is.
    expected = {"audit.view": 1, "audit.search": 4, "audit.export": 1, "audit.verify": 1, "audit.checkpoint": 6,
                "audit.key.rotate": 2, "audit.triggers.install": 6, "audit.dbroles.grant": 2,
                "audit.retention.floor": 2, "audit.retention.request": 6, "audit.retention.approve": 2,
                "audit.retention.archive": 7, "provisioning.acceptance.export": 1, "repository.verify": 1,
                "telemetry.rollup.prune": 7}
    datastore = {name: e.ocsf_activity for name, e in catalogue.CATALOGUE.items() if e.ocsf_class == 6005}
    assert datastore == expected


def test_the_identity_events_carry_the_account_they_are_about():
    from appliance.audit.export.formats import Ocsf

    context, ocsf = _context(), Ocsf()
    attempt = _payload("auth.login.failure", source="192.0.2.10", outcome="failure", reason="invalid credentials",
                       target={"type": "accounts.user", "id": "", "name": "no-such-user"})
    event = ocsf.event(attempt, "a" * 64, context)
    assert event["user"] == {"name": "no-such-user"} and event["service"] == {"name": "Appliance Management Suite"}
    role = ocsf.event(_payload("accounts.role.change", actor={"id": 1, "username": "alice", "roles": ["administrator"]},
                               target={"type": "accounts.user", "id": "3", "name": "victor"},
                               details={"role": ["viewer", "operator"]}), "a" * 64, context)
    assert (role["user"], role["privileges"]) == ({"name": "victor", "uid": "3"}, ["operator"])
    assert role["actor"]["user"] == {"name": "alice", "uid": "1", "type_id": 2, "type": "Admin"}
    command = ocsf.event(_payload("cli.command", actor={"id": None, "username": "root", "roles": []}, channel="cli",
                                  request_id="cli-3c9d", target={"type": "command", "id": "", "name": "migrate"},
                                  details={"command": "migrate", "argv": ["-v0", "a b"]}), "a" * 64, context)
    assert command["process"] == {"uid": "cli-3c9d", "name": "manage.py migrate",
                                  "cmd_line": "manage.py migrate -v0 'a b'"}
    assert command["device"] == {"hostname": "mgmt01", "type_id": 1, "type": "Server"}
    emulator = ocsf.event(_payload("simulation.bmc.stop", actor={"id": None, "username": "root", "roles": []},
                                   channel="cli", request_id="cli-77", details={"pid": 4242},
                                   target={"type": "inventory.node", "id": "3", "name": "gpu01"}), "a" * 64, context)
    assert emulator["process"] == {"uid": "cli-77", "name": "gpu01", "pid": 4242}
    called = ocsf.event(_payload("cli.command", channel="cli", request_id="cli-5", details={"args": ["x"]},
                                 target={"type": "command", "id": "", "name": "audit"}), "a" * 64, context)
    assert called["process"] == {"uid": "cli-5", "name": "manage.py audit"}  # call_command: no command line
    task = ocsf.event(_payload("task.run", channel="task", request_id="",
                               target={"type": "task", "id": "9b1f", "name": "audit.seal_unsigned"}), "a" * 64, context)
    assert task["process"] == {"uid": "9b1f", "name": "audit.seal_unsigned"}
    read = ocsf.event(_payload("audit.export", actor={"id": None, "username": "root", "roles": []}, channel="cli"),
                      "a" * 64, context)
    assert read["src_endpoint"] == {"hostname": "mgmt01"}
    assert read["database"] == {"name": "audit", "type_id": 1, "type": "Relational"}


def _valid_authentication_event():
    return {
        "activity_id": 1, "category_uid": 3, "category_name": "Identity & Access Management", "class_uid": 3002,
        "class_name": "Authentication", "type_uid": 300201, "time": 1767225600000, "severity_id": 1,
        "severity": "Informational", "status_id": 1, "status": "Success",
        "metadata": {"product": {"name": "P", "vendor_name": "V"}, "version": "1.1.0"},
        "user": {"name": "alice"}, "service": {"name": "portal"}, "src_endpoint": {"ip": "192.0.2.1"},
        "actor": {"user": {"name": "alice", "type_id": 1, "type": "User"}},
    }


@pytest.mark.parametrize(("change", "problem"), [
    (lambda e: e.pop("user"), "user: required attribute is missing"),
    (lambda e: e["metadata"]["product"].pop("vendor_name"), "metadata.product.vendor_name: required attribute"),
    (lambda e: e.update(activity_id=6, type_uid=300206), "activity_id: 6 is not one of"),
    (lambda e: e.update(severity_id="1"), "severity_id: integer_t expects an integer"),
    (lambda e: e.update(severity="High"), "severity: 'High' is not the caption of severity_id 1"),
    (lambda e: e["actor"].update(user={}), "actor.user: needs at least one of"),
    (lambda e: e.update(src_endpoint={"ip": "999.1.2.3"}), "src_endpoint.ip: '999.1.2.3' is not a valid ip_t"),
    (lambda e: e.update(device={"hostname": "h", "type_id": 1}), "device: not an attribute of this class without"),
    (lambda e: e.update(privileges=["admin"]), "privileges: not an attribute of this class"),
    (lambda e: e.pop("service"), "event: needs at least one of ['service', 'dst_endpoint']"),
    (lambda e: e.update(type_uid=300202), "type_uid: 300202 is not class_uid * 100 + activity_id"),
    (lambda e: e.update(category_uid=6), "category_uid: 6, the class's category is 3"),
    (lambda e: e["metadata"].update(profiles=["container"]), "does not offer the 'container' profile"),
    (lambda e: e["actor"]["user"].update(type_id=2), "actor.user.type: 'User' is not the caption of type_id 2"),
    (lambda e: e["src_endpoint"].update(port=70000), "src_endpoint.port: 70000 is outside port_t's range"),
])
def test_the_ocsf_validator_finds_each_kind_of_problem(change, problem):
    event = _valid_authentication_event()
    assert ocsf_schema.problems_of(event) == []
    change(event)
    found = ocsf_schema.problems_of(event)
    assert any(problem in text for text in found), found


def test_the_ocsf_schema_data_names_its_source():
    source = ocsf_schema.schema()["source"]
    assert source["repository"] == "https://github.com/ocsf/ocsf-schema"
    assert (source["tag"], source["version"]) == ("v1.1.0", "1.1.0")
    assert source["commit"] == "8ea34523a316c4bad7e360e870a23a8e5cb29bd5"
