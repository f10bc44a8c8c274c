"""The export formats. Each turns one record payload into bytes, deterministically: the verifier
renders the verified records again to point at the first changed line of a display file.

Nothing here touches the database or Django settings; everything a format needs beyond the record
comes from the ExportContext, which the manifest carries.
"""

import csv
import io
import ipaddress
import json
from dataclasses import dataclass, field

from .. import chain

PRODUCT_VENDOR = "AI Appliance"
PRODUCT_NAME = "Appliance Management Suite"
OCSF_SCHEMA_VERSION = "1.1.0"
SYSLOG_APP_NAME = "appliance-audit"
# RFC 5612's enterprise number for documentation, as RFC 5424's own examples use: an SD-ID with
# an "@" must carry a private enterprise number; an appliance installation may register its own.
SYSLOG_SD_ID = "audit@32473"
SYSLOG_FACILITY_LOG_AUDIT = 13

CEF_SEVERITY = {"informational": 1, "low": 3, "medium": 5, "high": 8, "critical": 10}
SYSLOG_SEVERITY = {"informational": 6, "low": 5, "medium": 4, "high": 3, "critical": 2}
OCSF_SEVERITY = {"informational": (1, "Informational"), "low": (2, "Low"), "medium": (3, "Medium"),
                 "high": (4, "High"), "critical": (5, "Critical")}
OCSF_CATEGORIES = {1: "System Activity", 2: "Findings", 3: "Identity & Access Management",
                   4: "Network Activity", 5: "Discovery", 6: "Application Activity"}
OCSF_STATUS = {"success": (1, "Success"), "failure": (2, "Failure"), "denied": (2, "Failure")}


@dataclass
class ExportContext:
    product_version: str
    host: str
    # event name -> {"description", "ocsf_class", "ocsf_class_name", "ocsf_activity"}; filled from the
    # catalogue while exporting, read back from the manifest when verifying.
    event_types: dict = field(default_factory=dict)
    resolve: object = None

    def event_type(self, name: str) -> dict:
        known = self.event_types.get(name)
        if known is None:
            if self.resolve is None:
                raise KeyError(f"event {name!r} is not described in the manifest's event_types")
            known = self.event_types[name] = self.resolve(name)
        return known

    @classmethod
    def from_manifest(cls, manifest: dict) -> "ExportContext":
        source = manifest.get("source", {})
        return cls(product_version=source.get("version", ""), host=source.get("host", "-"),
                   event_types=dict(manifest.get("event_types", {})))


def _compact_json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _ip(address: str) -> str | None:
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None


def _epoch_ms(timestamp: str) -> int:
    moment = chain.parse_timestamp(timestamp)
    return int(moment.timestamp()) * 1000 + moment.microsecond // 1000


class JsonLines:
    """The canonical form: exactly what the records file holds."""

    name, extension = "jsonl", "jsonl"

    def header(self, context: ExportContext) -> bytes:
        return b""

    def line(self, payload: dict, hash_hex: str, context: ExportContext) -> bytes:
        return chain.export_line(chain.canonical(payload), hash_hex)


def cef_header_escape(value: str) -> str:
    """ArcSight CEF header fields: backslash and pipe are escaped; a header holds no line break."""
    return value.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def cef_extension_escape(value: str) -> str:
    """ArcSight CEF extension values: backslash and equals sign are escaped, line breaks written as
    \\n and \\r."""
    return (value.replace("\\", "\\\\").replace("=", "\\=")
            .replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\r"))


class Cef:
    name, extension = "cef", "cef"

    def header(self, context: ExportContext) -> bytes:
        return b""

    def line(self, payload: dict, hash_hex: str, context: ExportContext) -> bytes:
        event_type = context.event_type(payload["event"])
        actor, target = payload["actor"], payload["target"]
        head = "|".join(cef_header_escape(v) for v in (
            PRODUCT_VENDOR, PRODUCT_NAME, context.product_version, payload["event"], event_type["description"]))
        extension = [
            ("rt", str(_epoch_ms(payload["timestamp"]))),
            ("externalId", payload["uuid"]),
            ("cn1", str(payload["sequence"])), ("cn1Label", "sequence"),
            ("suser", actor["username"]),
            ("suid", "" if actor["id"] is None else str(actor["id"])),
            ("spriv", ",".join(actor["roles"])),
            ("act", payload["action"]),
            ("cat", payload["category"]),
            ("outcome", payload["outcome"]),
            ("reason", payload["reason"]),
            ("requestClientApplication", payload["user_agent"]),
            ("cs1", payload["request_id"]), ("cs1Label", "requestId"),
            ("cs2", f"{target['type']}:{target['id']}"), ("cs2Label", "target"),
            ("cs3", target["name"]), ("cs3Label", "targetName"),
            ("cs4", payload["channel"]), ("cs4Label", "channel"),
            ("cs5", _compact_json(payload["details"])), ("cs5Label", "details"),
            ("cs6", hash_hex), ("cs6Label", "hash"),
            ("flexString1", payload["prev_hash"]), ("flexString1Label", "prevHash"),
        ]
        address = _ip(payload["source_address"])
        if address:
            extension.append(("src", address))
        elif payload["source_address"]:
            extension.append(("shost", payload["source_address"]))
        body = " ".join(f"{key}={cef_extension_escape(value)}" for key, value in extension if value != "")
        severity = CEF_SEVERITY.get(payload["severity"], 5)
        return f"CEF:0|{head}|{severity}|{body}\n".encode()


def sd_param_escape(value: str) -> str:
    """RFC 5424 section 6.3.3: inside PARAM-VALUE, '"', '\\' and ']' are escaped with a backslash."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("]", "\\]")


def _printable_ascii(value: str, limit: int) -> str:
    cleaned = "".join(ch if 33 <= ord(ch) <= 126 else "_" for ch in value)[:limit]
    return cleaned or "-"


class Syslog:
    """RFC 5424, facility 13 (log audit), one message a line (octet-counting framing is the
    transport's business): the record's key facts as structured data, its canonical JSON as MSG."""

    name, extension = "syslog", "log"

    def header(self, context: ExportContext) -> bytes:
        return b""

    def line(self, payload: dict, hash_hex: str, context: ExportContext) -> bytes:
        severity = SYSLOG_SEVERITY.get(payload["severity"], 5)
        priority = SYSLOG_FACILITY_LOG_AUDIT * 8 + severity
        actor, target = payload["actor"], payload["target"]
        params = [
            ("seq", str(payload["sequence"])), ("hash", hash_hex), ("prev", payload["prev_hash"]),
            ("event", payload["event"]), ("outcome", payload["outcome"]), ("channel", payload["channel"]),
            ("actor", actor["username"]), ("src", payload["source_address"]), ("request", payload["request_id"]),
            ("target", f"{target['type']}:{target['id']}"),
        ]
        data = " ".join(f'{name}="{sd_param_escape(value)}"' for name, value in params)
        message = chain.canonical(payload)
        head = (f"<{priority}>1 {payload['timestamp']} {_printable_ascii(context.host, 255)} {SYSLOG_APP_NAME} - "
                f"{_printable_ascii(payload['event'], 32)} [{SYSLOG_SD_ID} {data}] ")
        return head.encode() + b"\xef\xbb\xbf" + message + b"\n"


class Ocsf:
    """OCSF 1.x events, one JSON object a line, in each event type's catalogue class."""

    name, extension = "ocsf", "ocsf.jsonl"

    def header(self, context: ExportContext) -> bytes:
        return b""

    def event(self, payload: dict, hash_hex: str, context: ExportContext) -> dict:
        event_type = context.event_type(payload["event"])
        class_uid, activity_id = event_type["ocsf_class"], event_type["ocsf_activity"]
        category_uid = class_uid // 1000
        severity_id, severity = OCSF_SEVERITY.get(payload["severity"], (0, "Unknown"))
        status_id, status = OCSF_STATUS.get(payload["outcome"], (99, "Other"))
        actor, target = payload["actor"], payload["target"]
        user = {"name": actor["username"]}
        if actor["id"] is not None:
            user["uid"] = str(actor["id"])
        event = {
            "activity_id": activity_id,
            "category_uid": category_uid,
            "category_name": OCSF_CATEGORIES.get(category_uid, "Other"),
            "class_uid": class_uid,
            "class_name": event_type["ocsf_class_name"],
            "type_uid": class_uid * 100 + activity_id,
            "time": _epoch_ms(payload["timestamp"]),
            "severity_id": severity_id,
            "severity": severity,
            "status_id": status_id,
            "status": status,
            "message": event_type["description"],
            "actor": {"user": user},
            "metadata": {
                "product": {"name": PRODUCT_NAME, "vendor_name": PRODUCT_VENDOR, "version": context.product_version},
                "version": OCSF_SCHEMA_VERSION,
                "uid": payload["uuid"],
                "sequence": payload["sequence"],
                "log_name": "audit",
            },
            "unmapped": {
                "event": payload["event"], "category": payload["category"], "action": payload["action"],
                "channel": payload["channel"], "outcome": payload["outcome"], "target": target,
                "details": payload["details"], "roles": actor["roles"], "hash": hash_hex,
                "prev_hash": payload["prev_hash"],
            },
        }
        if payload["outcome"] != "success" or payload["reason"]:
            event["status_detail"] = payload["reason"] or payload["outcome"]
        if payload["request_id"]:
            event["metadata"]["correlation_uid"] = payload["request_id"]
        address = _ip(payload["source_address"])
        if address:
            event["src_endpoint"] = {"ip": address}
        elif payload["source_address"]:
            event["src_endpoint"] = {"hostname": payload["source_address"]}
        if payload["user_agent"]:
            event["http_request"] = {"user_agent": payload["user_agent"]}
        return event

    def line(self, payload: dict, hash_hex: str, context: ExportContext) -> bytes:
        return _compact_json(self.event(payload, hash_hex, context)).encode() + b"\n"


CSV_COLUMNS = ("sequence", "uuid", "timestamp", "event", "category", "severity", "actor_id", "actor_username",
               "actor_roles", "channel", "source_address", "user_agent", "request_id", "action", "target_type",
               "target_id", "target_name", "outcome", "reason", "details", "prev_hash", "hash")
# A cell starting with one of these is a formula to a spreadsheet (CSV injection): such text cells
# get a leading apostrophe. The canonical records file keeps the exact values.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value) -> str:
    if value is None:
        return ""
    text = str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


class Csv:
    name, extension = "csv", "csv"

    def header(self, context: ExportContext) -> bytes:
        return self._row(CSV_COLUMNS)

    @staticmethod
    def _row(cells) -> bytes:
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\r\n").writerow(cells)
        return buffer.getvalue().encode()

    def line(self, payload: dict, hash_hex: str, context: ExportContext) -> bytes:
        actor, target = payload["actor"], payload["target"]
        values = (payload["sequence"], payload["uuid"], payload["timestamp"], payload["event"], payload["category"],
                  payload["severity"], actor["id"], actor["username"], ",".join(actor["roles"]),
                  payload["channel"], payload["source_address"], payload["user_agent"], payload["request_id"],
                  payload["action"], target["type"], target["id"], target["name"], payload["outcome"],
                  payload["reason"], _compact_json(payload["details"]), payload["prev_hash"], hash_hex)
        return self._row([v if isinstance(v, int) else _cell(v) for v in values])


FORMATS = {f.name: f for f in (JsonLines(), Cef(), Syslog(), Ocsf(), Csv())}
