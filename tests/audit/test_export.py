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

from appliance.audit import catalogue, chain, signing
from appliance.audit.export import ExportError, export_bundle
from appliance.audit.models import AuditRecord
from appliance.audit.verify import verify_bundle

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
        assert json.loads(cef_unescape(parsed["details"])) == record["details"]
        assert cef_unescape(parsed["outcome"]) == record["outcome"]
    tricky = next(e for e in records if "Rack" in json.dumps(e["record"]["details"]))
    line = lines[records.index(tricky)]
    assert '\\=' in line and "\\\\" in line  # '=' and '\' escaped in the extension


def test_cef_escaping_follows_arcsight_rules():
    from appliance.audit.export.formats import cef_extension_escape, cef_header_escape

    assert cef_header_escape("a|b\\c") == "a\\|b\\\\c"
    assert cef_extension_escape("a=b\\c\nd\re|f") == "a\\=b\\\\c\\nd\\re|f"


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
        event_type = catalogue.get(record["event"])
        assert event["class_uid"] == event_type.ocsf_class and event["activity_id"] == event_type.ocsf_activity
        assert event["type_uid"] == event["class_uid"] * 100 + event["activity_id"]
        assert event["category_uid"] == event["class_uid"] // 1000
        assert event["time"] == int(chain.parse_timestamp(record["timestamp"]).timestamp() * 1000)
        assert event["actor"]["user"]["name"] == record["actor"]["username"]
        assert event["metadata"]["product"]["name"] and event["metadata"]["version"]
        assert event["unmapped"]["hash"] == entry["hash"]
        assert event["status"] == ("Success" if record["outcome"] == "success" else "Failure")
    login = next(e for e, r in zip(events, records, strict=True) if r["record"]["event"] == "auth.login.failure")
    assert login["class_uid"] == 3002 and login["src_endpoint"]["ip"] == "192.0.2.10"


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
