"""The export formats. Each turns one record payload into bytes, deterministically: the verifier
renders the verified records again to point at the first changed line of a display file.

Nothing here touches the database or Django settings; everything a format needs beyond the record
comes from the ExportContext, which the manifest carries.

Every line-based format keeps one record on one line whatever the record holds: control characters
and Unicode line separators in any field are escaped (syslog, OCSF) or replaced (CEF, which has no
escape for them); the canonical records file keeps the exact values.
"""

import csv
import io
import ipaddress
import json
import re
import shlex
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
# The target type of records about a user account (the user model's label).
USER_TARGET_TYPE = "accounts.user"

CEF_SEVERITY = {"informational": 1, "low": 3, "medium": 5, "high": 8, "critical": 10}
SYSLOG_SEVERITY = {"informational": 6, "low": 5, "medium": 4, "high": 3, "critical": 2}
OCSF_SEVERITY = {"informational": (1, "Informational"), "low": (2, "Low"), "medium": (3, "Medium"),
                 "high": (4, "High"), "critical": (5, "Critical")}
OCSF_CATEGORIES = {1: "System Activity", 2: "Findings", 3: "Identity & Access Management",
                   4: "Network Activity", 5: "Discovery", 6: "Application Activity"}
OCSF_STATUS = {"success": (1, "Success"), "failure": (2, "Failure"), "denied": (2, "Failure")}

# Characters that end a line for some reader (C0 and C1 controls, DEL, U+2028, U+2029).
_LINE_BREAKING = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


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


def _unicode_escape(match: re.Match) -> str:
    return f"\\u{ord(match.group()):04x}"


def _compact_json(value) -> str:
    """One-line JSON: besides what JSON escapes itself, DEL, C1 controls and U+2028/U+2029 (which
    only occur inside strings) are written as \\u escapes, which parse back to the same value."""
    return _LINE_BREAKING.sub(_unicode_escape, json.dumps(value, sort_keys=True, separators=(",", ":"),
                                                          ensure_ascii=False))


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(address)
    except ValueError:
        return None
    # An IPv4 client of a dual-stack listener arrives as ::ffff:a.b.c.d.
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped or address


def _epoch_ms(timestamp: str) -> int:
    moment = chain.parse_timestamp(timestamp)
    return int(moment.timestamp()) * 1000 + moment.microsecond // 1000


def _target_is_user(payload: dict) -> bool:
    return payload["target"]["type"] == USER_TARGET_TYPE and bool(payload["target"]["name"])


class JsonLines:
    """The canonical form: exactly what the records file holds."""

    name, extension = "jsonl", "jsonl"

    def header(self, context: ExportContext) -> bytes:
        return b""

    def line(self, payload: dict, hash_hex: str, context: ExportContext) -> bytes:
        return chain.export_line(chain.canonical(payload), hash_hex)


def cef_header_escape(value: str) -> str:
    """ArcSight CEF header fields: backslash and pipe are escaped; a header holds no line break or
    other control character (each becomes a space)."""
    return _LINE_BREAKING.sub(" ", value.replace("\\", "\\\\").replace("|", "\\|"))


def cef_extension_escape(value: str) -> str:
    """ArcSight CEF extension values: backslash and equals sign are escaped, line breaks written as
    \\n and \\r. CEF has no escape for any other control character: each becomes U+FFFD."""
    value = (value.replace("\\", "\\\\").replace("=", "\\=")
             .replace("\n", "\\n").replace("\r", "\\r"))
    return _LINE_BREAKING.sub("\ufffd", value)


# ArcSight's maximum lengths of the extension keys used here ("Implementing ArcSight CEF", the
# extension dictionary): a receiver cuts a longer value silently, so it is cut here, visibly, and
# the record names the cut keys in flexString2 ("truncated"). The full values stay in records.jsonl.
CEF_DEFAULT_LIMIT = 1023
CEF_LIMITS = {"act": 63, "outcome": 63, "externalId": 40, "flexString1Label": 128, "flexString2Label": 128,
              **{f"cs{n}": 4000 for n in range(1, 7)}}
CEF_TRUNCATED_KEY, CEF_TRUNCATED_LABEL = "flexString2", "truncated"


def cef_fit(value: str, limit: int) -> tuple[str, bool]:
    """The escaped extension value, cut (between escapes, never inside one) so that it and the note
    saying it was cut stay within `limit` characters. Returns (escaped value, whether it was cut)."""
    escaped = cef_extension_escape(value)
    if len(escaped) <= limit:
        return escaped, False
    note = f"...[truncated: {len(value)} characters; the full value is in records.jsonl]"
    budget, kept, used = limit - len(note), [], 0
    for char in value:
        piece = cef_extension_escape(char)
        if used + len(piece) > budget:
            break
        kept.append(piece)
        used += len(piece)
    return "".join(kept) + note, True


class Cef:
    name, extension = "cef", "cef"

    def header(self, context: ExportContext) -> bytes:
        return b""

    def line(self, payload: dict, hash_hex: str, context: ExportContext) -> bytes:
        event_type = context.event_type(payload["event"])
        actor, target = payload["actor"], payload["target"]
        head = "|".join(cef_header_escape(v) for v in (
            PRODUCT_VENDOR, PRODUCT_NAME, context.product_version, payload["event"], event_type["description"]))
        source_user = actor["username"]
        if not source_user and _target_is_user(payload) and event_type["ocsf_class"] == 3002:
            # An unauthenticated login attempt: the user it claimed to be is who attempted it.
            source_user = target["name"]
        extension = [
            ("rt", str(_epoch_ms(payload["timestamp"]))),
            ("externalId", payload["uuid"]),
            ("cn1", str(payload["sequence"])), ("cn1Label", "sequence"),
            ("suser", source_user),
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
        if _target_is_user(payload):
            extension += [("duser", target["name"]), ("duid", target["id"])]
        address = _ip(payload["source_address"])
        if address is not None and address.version == 4:
            extension.append(("src", str(address)))
        elif address is not None:
            # CEF:0's src is an IPv4 address; the IPv6 one goes where the CEF guide puts it.
            extension += [("c6a2", str(address)), ("c6a2Label", "Source IPv6 Address")]
        elif payload["source_address"]:
            extension.append(("shost", payload["source_address"]))
        fields, truncated = [], []
        for key, value in extension:
            if value == "":
                continue
            escaped, cut = cef_fit(value, CEF_LIMITS.get(key, CEF_DEFAULT_LIMIT))
            fields.append(f"{key}={escaped}")
            if cut:
                truncated.append(key)
        if truncated:
            fields += [f"{CEF_TRUNCATED_KEY}={','.join(truncated)}", f"{CEF_TRUNCATED_KEY}Label={CEF_TRUNCATED_LABEL}"]
        severity = CEF_SEVERITY.get(payload["severity"], 5)
        return f"CEF:0|{head}|{severity}|{' '.join(fields)}\n".encode()


def sd_param_escape(value: str) -> str:
    """RFC 5424 section 6.3.3: inside PARAM-VALUE, '"', '\\' and ']' are escaped with a backslash.
    A control character or line separator, which would end the line for a line-based receiver, is
    written as the six characters \\uXXXX (unambiguous: a backslash of the value is doubled)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("]", "\\]")
    return _LINE_BREAKING.sub(_unicode_escape, escaped)


def _printable_ascii(value: str, limit: int) -> str:
    cleaned = "".join(ch if 33 <= ord(ch) <= 126 else "_" for ch in value)[:limit]
    return cleaned or "-"


class Syslog:
    """RFC 5424, facility 13 (log audit), one message a line (octet-counting framing is the
    transport's business): the record's key facts as structured data, its canonical JSON as MSG
    (DEL, C1 controls and U+2028/U+2029 inside its strings as \\u escapes, so that no reader breaks
    the line; the JSON parses to the same record)."""

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
        message = _LINE_BREAKING.sub(_unicode_escape, chain.canonical(payload).decode("utf-8"))
        head = (f"<{priority}>1 {_printable_ascii(payload['timestamp'], 64)} {_printable_ascii(context.host, 255)} "
                f"{SYSLOG_APP_NAME} - {_printable_ascii(payload['event'], 32)} [{SYSLOG_SD_ID} {data}] ")
        return head.encode() + b"\xef\xbb\xbf" + message.encode("utf-8") + b"\n"


# OCSF 1.1.0 values used below (the schema's enumerations).
_OCSF_USER_ADMIN, _OCSF_USER_REGULAR, _OCSF_USER_OTHER = 2, 1, 99
_OCSF_DEVICE_SERVER = (1, "Server")
_OCSF_DATABASE_RELATIONAL = (1, "Relational")
_OCSF_DATASTORE_DATABASE = (1, "Database")
_OCSF_HTTP_METHODS = frozenset({"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT", "TRACE"})
_OCSF_HOSTNAME = re.compile(r"^(([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9\-]*[a-zA-Z0-9])\.)*"
                            r"([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9\-]*[A-Za-z0-9])$")
# Roles whose users OCSF calls administrators (user.type_id 2); everyone else signed in is a user.
_ADMIN_ROLES = frozenset({"administrator"})


def _drop_empty(mapping: dict) -> dict:
    return {key: value for key, value in mapping.items() if value not in ("", None, [], {})}


def _ocsf_host(host: str) -> dict:
    """The appliance host as an endpoint: by hostname when it is one, else by name."""
    return {"hostname": host} if _OCSF_HOSTNAME.fullmatch(host) else {"name": host}


def _ocsf_actor_user(actor: dict) -> dict:
    if not actor["username"] and actor["id"] is None:
        # Nobody signed in (a refused or failed request): not any account, whatever its name.
        return {"uid": "anonymous", "type_id": _OCSF_USER_OTHER, "type": "Unauthenticated"}
    user = _drop_empty({"name": actor["username"], "uid": "" if actor["id"] is None else str(actor["id"])})
    if actor["id"] is not None:
        admin = bool(_ADMIN_ROLES.intersection(actor["roles"]))
        user["type_id"], user["type"] = (_OCSF_USER_ADMIN, "Admin") if admin else (_OCSF_USER_REGULAR, "User")
    return user


def _ocsf_subject_user(payload: dict) -> dict:
    """The account an identity event is about: its target when that is a user account (the
    attempted username of a failed login among them), else whoever acted."""
    target = payload["target"]
    if _target_is_user(payload):
        return _drop_empty({"name": target["name"], "uid": target["id"]})
    return _ocsf_actor_user(payload["actor"])


def _ocsf_source(payload: dict, context: ExportContext) -> dict:
    """Where the action came from: the client's address, or, for work started on the appliance
    itself (a command at its console, a scheduled task), the appliance host."""
    address = _ip(payload["source_address"])
    if address is not None:
        return {"ip": str(address)}
    if payload["source_address"]:
        return {"name": payload["source_address"]}
    return _ocsf_host(context.host)


def _ocsf_device(context: ExportContext) -> dict:
    return {**_ocsf_host(context.host), "type_id": _OCSF_DEVICE_SERVER[0], "type": _OCSF_DEVICE_SERVER[1]}


def _ocsf_http_request(payload: dict) -> dict:
    details = payload["details"] if isinstance(payload["details"], dict) else {}
    method, path = details.get("method"), details.get("path")
    request = {"user_agent": payload["user_agent"]}
    if isinstance(method, str) and method in _OCSF_HTTP_METHODS:
        request["http_method"] = method
    if isinstance(path, str) and path:
        request["url"] = {"path": path}
    return _drop_empty(request)


def _ocsf_target_name(payload: dict) -> str:
    target = payload["target"]
    return target["name"] or (f"{target['type']}:{target['id']}" if target["id"] else target["type"]) \
        or payload["event"]


def _process_activity(event: dict, payload: dict, context: ExportContext) -> None:
    details = payload["details"] if isinstance(payload["details"], dict) else {}
    target = payload["target"]
    # A task run is known by its task id; anything else by the request it served (a command's own).
    uid = target["id"] if target["type"] == "task" and target["id"] else payload["request_id"] or payload["uuid"]
    process = {"uid": uid, "name": _ocsf_target_name(payload)}
    pid = details.get("pid")
    if type(pid) is int and 0 < pid < 2**31:
        process["pid"] = pid
    if target["type"] == "command":
        process["name"] = f"manage.py {target['name']}"
        argv = details.get("argv")  # the command line (secrets redacted); none when called from code
        if isinstance(argv, list):
            process["cmd_line"] = shlex.join(["manage.py", target["name"], *map(str, argv)])
    event["process"] = process
    event["device"] = _ocsf_device(context)


def _account_change(event: dict, payload: dict, context: ExportContext) -> None:
    event["user"] = _ocsf_subject_user(payload)


def _authentication(event: dict, payload: dict, context: ExportContext) -> None:
    event["user"] = _ocsf_subject_user(payload)
    event["service"] = {"name": PRODUCT_NAME}


def _entity_management(event: dict, payload: dict, context: ExportContext) -> None:
    target = payload["target"]
    event["entity"] = _drop_empty({"uid": target["id"], "name": _ocsf_target_name(payload), "type": target["type"]})


def _user_access(event: dict, payload: dict, context: ExportContext) -> None:
    event["user"] = _ocsf_subject_user(payload)
    details = payload["details"] if isinstance(payload["details"], dict) else {}
    change = details.get("role")
    granted = change[-1] if isinstance(change, list) and change else change
    event["privileges"] = [str(granted)] if granted not in (None, "") else []


def _application_lifecycle(event: dict, payload: dict, context: ExportContext) -> None:
    target = payload["target"]
    event["app"] = {"name": PRODUCT_NAME, "vendor_name": PRODUCT_VENDOR, "version": context.product_version,
                    "feature": _drop_empty({"uid": target["id"], "name": _ocsf_target_name(payload)})}
    if not event["app"]["version"]:
        del event["app"]["version"]


def _api_activity(event: dict, payload: dict, context: ExportContext) -> None:
    details = payload["details"] if isinstance(payload["details"], dict) else {}
    operation = details.get("view") or details.get("path") or payload["target"]["name"] or payload["event"]
    api = {"operation": str(operation)}
    if payload["request_id"]:
        api["request"] = {"uid": payload["request_id"]}
    if isinstance(details.get("status"), int):
        api["response"] = {"code": details["status"]}
    event["api"] = api
    if event["activity_id"] == 99 and isinstance(details.get("method"), str):
        event["activity_name"] = details["method"]


def _datastore_activity(event: dict, payload: dict, context: ExportContext) -> None:
    # The data touched is the log (or records) of the app the event belongs to, in the appliance's
    # relational database.
    event["database"] = {"name": payload["event"].split(".", 1)[0], "type_id": _OCSF_DATABASE_RELATIONAL[0],
                         "type": _OCSF_DATABASE_RELATIONAL[1]}
    event["type_id"], event["type"] = _OCSF_DATASTORE_DATABASE


# Per OCSF 1.1.0 class: what fills its required attributes, whether it offers src_endpoint and
# http_request, and whether the "host" profile applies (it carries actor and device there).
OCSF_CLASS_MAPPINGS = {
    1007: (_process_activity, False, False, True),
    3001: (_account_change, True, True, True),
    3002: (_authentication, True, True, True),
    3004: (_entity_management, False, False, True),
    3005: (_user_access, False, False, True),
    6002: (_application_lifecycle, False, False, True),
    6003: (_api_activity, True, True, False),
    6005: (_datastore_activity, True, True, False),
}


class Ocsf:
    """OCSF 1.1.0 events, one JSON object a line, in each event type's catalogue class, with every
    attribute that class requires; what the class has no attribute for is kept under `unmapped`."""

    name, extension = "ocsf", "ocsf.jsonl"

    def header(self, context: ExportContext) -> bytes:
        return b""

    def event(self, payload: dict, hash_hex: str, context: ExportContext) -> dict:
        event_type = context.event_type(payload["event"])
        class_uid, activity_id = event_type["ocsf_class"], event_type["ocsf_activity"]
        fill, has_source, has_http, host_profile = OCSF_CLASS_MAPPINGS[class_uid]
        category_uid = class_uid // 1000
        severity_id, severity = OCSF_SEVERITY.get(payload["severity"], (0, "Unknown"))
        status_id, status = OCSF_STATUS.get(payload["outcome"], (99, "Other"))
        actor, target = payload["actor"], payload["target"]
        event = {
            "activity_id": activity_id,
            "category_uid": category_uid,
            "category_name": OCSF_CATEGORIES.get(category_uid, "Other"),
            "class_uid": class_uid,
            "class_name": event_type["ocsf_class_name"],
            "type_uid": class_uid * 100 + activity_id,
            "time": _epoch_ms(payload["timestamp"]),
            "timezone_offset": 0,
            "severity_id": severity_id,
            "severity": severity,
            "status_id": status_id,
            "status": status,
            "message": event_type["description"],
            "actor": {"user": _ocsf_actor_user(actor)},
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
        if not context.product_version:
            del event["metadata"]["product"]["version"]
        if host_profile:
            event["metadata"]["profiles"] = ["host"]
            event["device"] = _ocsf_device(context)
        if payload["outcome"] != "success" or payload["reason"]:
            event["status_detail"] = payload["reason"] or payload["outcome"]
        if payload["request_id"]:
            event["metadata"]["correlation_uid"] = payload["request_id"]
        if has_source:
            event["src_endpoint"] = _ocsf_source(payload, context)
        elif payload["source_address"]:
            event["unmapped"]["source_address"] = payload["source_address"]
        http_request = _ocsf_http_request(payload)
        if has_http and http_request:
            event["http_request"] = http_request
        elif payload["user_agent"]:
            event["unmapped"]["user_agent"] = payload["user_agent"]
        fill(event, payload, context)
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
