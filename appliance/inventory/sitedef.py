"""The site definition: one YAML file describing an appliance (see the comment block of
sites/demo.yml and README.md, "Site definition").

`parse_site` reads the file with ruamel.yaml, which keeps the line of every key and item, checks all
of it and raises one SiteValidationError listing every problem found, each with its file, line and
field path. It writes nothing: the import (services.import_site) works from the SiteDefinition it returns.
"""

import functools
import hashlib
import importlib.util
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError
from ruamel.yaml.reader import ReaderError

from appliance.core import resources

from . import sitevalues, tunables, yamllimits
from .choices import (
    DEFAULT_OPENSM_PRIORITY,
    NODE_ROLES,
    OPENSM_PRIORITY_MAX,
    OPENSM_PRIORITY_MIN,
    SubnetManagerKind,
)
from .endpoints import endpoint_of

# --------------------------------------------------------------------------------------------------
# Errors


@dataclass(frozen=True)
class SiteError:
    file: str
    line: int
    path: str
    message: str

    def __str__(self):
        where = f"{self.file}:{self.line}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class SiteValidationError(Exception):
    def __init__(self, errors: list[SiteError]):
        self.errors = sorted(errors, key=lambda e: (e.file, e.line, e.path))
        super().__init__(str(self))

    def __str__(self):
        return "\n".join(str(e) for e in self.errors)


class ErrorCollector:
    """Gathers every error of one file, so that all of them are reported at once."""

    def __init__(self, filename: str):
        self.filename = filename
        self.errors: list[SiteError] = []

    def add(self, line: int, path: str, message: str) -> None:
        self.errors.append(SiteError(self.filename, line, path, message))

    def raise_if_any(self) -> None:
        if self.errors:
            raise SiteValidationError(self.errors)


# --------------------------------------------------------------------------------------------------
# Reading YAML with positions

_MISSING = object()


def _type_name(value) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "a number"
    if isinstance(value, float):
        return "a decimal number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def to_plain(value):
    """ruamel's commented containers and scalar subclasses as plain dicts, lists, str, int, bool."""
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


class Cursor:
    """A value of the document with its field path and line, reporting errors to a collector."""

    def __init__(self, value, path: str, line: int, collector: ErrorCollector):
        self.value, self.path, self.line, self.collector = value, path, line, collector

    def error(self, message: str) -> None:
        self.collector.add(self.line, self.path, message)

    def _sub_path(self, key) -> str:
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        return f"{self.path}.{key}" if self.path else str(key)

    def child(self, key) -> "Cursor":
        value = self.value[key]
        try:
            line = (self.value.lc.item(key) if isinstance(key, int) else self.value.lc.key(key))[0] + 1
        except (AttributeError, KeyError, IndexError, TypeError):
            line = self.line
        return Cursor(value, self._sub_path(key), line, self.collector)

    def missing(self, key: str, hint: str = "") -> None:
        self.collector.add(self.line, self._sub_path(key), "required field missing" + hint)

    # containers

    def mapping(self, allowed: tuple[str, ...] | None = None, required: tuple[str, ...] = ()) -> dict | None:
        """The mapping's keys -> Cursor; reports unknown keys (when `allowed` is given) and missing ones."""
        if not isinstance(self.value, dict):
            self.error(f"expected a mapping, got {_type_name(self.value)}")
            return None
        result = {}
        for key in self.value:
            if allowed is not None and key not in allowed:
                Cursor(None, self._sub_path(key), self.child(key).line, self.collector).error(
                    f"unknown key (allowed here: {', '.join(allowed)})")
                continue
            result[str(key)] = self.child(key)
        for key in required:
            if key not in result and (allowed is None or key in allowed):
                self.missing(key)
        return result

    def require(self, fields: dict, key: str) -> "Cursor | None":
        if key in fields:
            return fields[key] if isinstance(fields[key], Cursor) else self.child(key)
        self.missing(key)
        return None

    def sequence(self) -> list["Cursor"] | None:
        if not isinstance(self.value, list):
            self.error(f"expected a list, got {_type_name(self.value)}")
            return None
        return [self.child(i) for i in range(len(self.value))]

    # scalars: each returns the checked value, or None after reporting an error

    def text(self, pattern: re.Pattern | None = None, what: str = "") -> str | None:
        if not isinstance(self.value, str) or isinstance(self.value, bool):
            self.error(f"expected text, got {_type_name(self.value)}")
            return None
        value = str(self.value).strip()
        if not value:
            self.error("must not be empty")
            return None
        if pattern is not None and not pattern.match(value):
            self.error(f"{value!r} is not {what}")
            return None
        return value

    def integer(self, minimum: int | None = None, maximum: int | None = None) -> int | None:
        if not isinstance(self.value, int) or isinstance(self.value, bool):
            self.error(f"expected a whole number, got {_type_name(self.value)}")
            return None
        value = int(self.value)
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            bounds = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
            self.error(f"{value} is out of range (must be {bounds})")
            return None
        return value

    def boolean(self) -> bool | None:
        if not isinstance(self.value, bool):
            self.error(f"expected true or false, got {_type_name(self.value)}")
            return None
        return bool(self.value)

    def choice(self, choices) -> str | None:
        value = self.text()
        if value is not None and value not in choices:
            self.error(f"{value!r} is not one of: {', '.join(choices)}")
            return None
        return value

    def url(self) -> str | None:
        value = self.text()
        if value is None:
            return None
        if not _is_http_url(value):
            self.error(f"{value!r} is not a URL (expected https://host[:port])")
            return None
        return value.rstrip("/")

    def ip_address(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        value = self.text()
        if value is None:
            return None
        try:
            return ipaddress.ip_address(value)
        except ValueError:
            self.error(f"{value!r} is not an IP address")
            return None

    def cidr(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
        value = self.text()
        if value is None:
            return None
        if "/" not in value:
            self.error(f"{value!r} is not a CIDR subnet (expected address/prefix, e.g. 10.10.0.0/16)")
            return None
        try:
            return ipaddress.ip_network(value, strict=True)
        except ValueError as exc:
            reason = "has host bits set" if "host bits" in str(exc) else "is not a CIDR subnet"
            self.error(f"{value!r} {reason}")
            return None

    def text_list(self, split_commas: bool = False) -> list[str] | None:
        if split_commas and isinstance(self.value, str):
            items = [part.strip() for part in self.value.split(",") if part.strip()]
            return items
        items = self.sequence()
        if items is None:
            return None
        values = [item.text() for item in items]
        return None if any(v is None for v in values) else values

    def scalar_mapping(self) -> dict | None:
        """A mapping of names to scalars (text, numbers, true/false)."""
        fields = self.mapping()
        if fields is None:
            return None
        result = {}
        for key, cursor in fields.items():
            if isinstance(cursor.value, dict | list) or cursor.value is None:
                cursor.error(f"expected text, a number or true/false, got {_type_name(cursor.value)}")
                continue
            result[key] = to_plain(cursor.value)
        return result


HOSTNAME_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def _is_http_url(value: str) -> bool:
    # BMCs are often reached by a short host name or an address, which Django's URLValidator refuses.
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return False
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host or parts.username or parts.password:
        return False
    if port == 0 or any(c.isspace() for c in value):
        return False
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return not host.replace(".", "").isdigit() and all(HOSTNAME_LABEL.fullmatch(label) for label in host.split("."))


def load_yaml(text: str, collector: ErrorCollector) -> Cursor | None:
    """Parse `text`; a syntax error or a document over the limits (yamllimits) is reported with its line
    and yields None. A control character in any key or text is reported too (the document is still
    returned, so that its other errors are reported at once)."""
    if not yamllimits.check_limits(text, lambda line, message: collector.add(line, "", message)):
        return None
    yaml = YAML(typ="rt")
    try:
        data = yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = ": ".join(part for part in (exc.context, exc.problem) if part)
        collector.add(mark.line + 1 if mark else 1, "", f"YAML syntax error: {problem or exc}")
        return None
    except ReaderError as exc:  # a character YAML text may not hold (NUL, most other controls)
        line = text.count("\n", 0, max(exc.position, 0)) + 1
        collector.add(line, "", f"YAML syntax error: character #x{exc.character:04x} is not allowed in YAML text")
        return None
    if data is None:
        collector.add(1, "", "the file is empty")
        return None
    for line, path, message in yamllimits.control_characters(data):
        collector.add(line, path, message)
    return Cursor(data, "", 1, collector)


# --------------------------------------------------------------------------------------------------
# The definition

NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
NAME_WHAT = "a name (lower-case letters, digits and '-', at most 63 characters)"
SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
UNIX_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
ABSOLUTE_PATH = re.compile(r"^/[^\0\n]*$")
INFLUX_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
BECOME_METHODS = ("sudo", "su", "doas")
PKEY = re.compile(r"^0x[0-9a-fA-F]{1,4}$")

NETWORK_KINDS = ("ipoib", "management", "bmc")
FILESYSTEM_TYPES = ("lustre", "beegfs", "nfs-rdma")
POOL_KINDS = ("training", "inference")
SWITCH_KINDS = ("infiniband", "ethernet")
SUBNET_MANAGERS = tuple(SubnetManagerKind.values)


# Keys of a BMC that once held a login or a path to one: each gets its own answer, the same whatever
# its value, so that no error tells anything about a file or a variable (see README, "Credentials").
RETIRED_BMC_KEYS = {
    "password": "a site definition holds no password and names no file or variable to read one from: "
                f"an Administrator creates a credential ({resources.program()} credential create NAME) bound to this "
                "BMC's URL, and the site names it (credential: NAME)",
    "username": f"the BMC user name belongs to the credential ({resources.program()} credential create NAME --username USER); "
                "name the credential here (credential: NAME)",
    "ca_file": "the CA that verifies a BMC's certificate belongs to its credential "
               f"({resources.program()} credential create NAME --ca-file FILE); remove it here",
}


@dataclass(frozen=True)
class BMCDef:
    url: str
    credential: str  # the name of a Credential bound to the URL's endpoint
    verify_tls: bool
    line: int = 0  # the line of the url


@dataclass(frozen=True)
class NodeDef:
    name: str
    role: str
    platform: str
    management_address: str
    bmc: BMCDef
    ipoib: dict[str, str]
    labels: dict
    line: int


@dataclass(frozen=True)
class NetworkDef:
    name: str
    kind: str
    cidr: str
    pkey: str
    mtu: int | None


@dataclass(frozen=True)
class SwitchDef:
    name: str
    kind: str
    model: str
    tier: str
    management_address: str | None
    port_count: int


@dataclass(frozen=True)
class FilesystemDef:
    name: str
    type: str
    servers: list[str]
    source: str
    mount_point: str
    options: list[str]
    tunables: dict


@dataclass(frozen=True)
class PoolDef:
    name: str
    kind: str
    nodes: list[str]
    settings: dict


@dataclass
class SiteDefinition:
    filename: str
    sha256: str
    name: str
    description: str
    simulation: bool
    fabric: dict
    networks: list[NetworkDef] = field(default_factory=list)
    nodes: list[NodeDef] = field(default_factory=list)
    switches: list[SwitchDef] = field(default_factory=list)
    filesystems: list[FilesystemDef] = field(default_factory=list)
    pools: list[PoolDef] = field(default_factory=list)
    package_repository: dict = field(default_factory=dict)  # {"url": ...}; empty: the management node's
    ssh: dict = field(default_factory=dict)  # how the nodes are reached (user, key, known_hosts, become, python)
    telemetry: dict = field(default_factory=dict)  # the nodes' collectors (interval, ingest URL, InfluxDB, ...)
    platforms: dict = field(default_factory=dict, repr=False)  # slug -> platforms.PlatformSpec
    maintenance: dict = field(default_factory=dict)  # appliance.maintenance: {window, reset_timeout}
    lines: dict = field(default_factory=dict, repr=False)  # top-level section -> line

    def summary(self) -> str:
        def count(n, word):
            return f"{n} {word}{'' if n == 1 else 'es' if word.endswith('h') else 's'}"

        return ", ".join([count(len(self.nodes), "node"), count(len(self.networks), "network"),
                          count(len(self.filesystems), "filesystem"), count(len(self.pools), "pool"),
                          count(len(self.switches), "switch")])


# --------------------------------------------------------------------------------------------------
# Parsing


@functools.cache
def window_rules():
    """The maintenance-window rules of the playbooks (module_utils/appliance_window.py), loaded from its file."""
    path = Path(settings.COLLECTION_DIR) / "plugins" / "module_utils" / "appliance_window.py"
    spec = importlib.util.spec_from_file_location("appliance_window", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_site(text: str, filename: str) -> SiteDefinition:
    """Check a site definition completely; raises SiteValidationError with every problem found."""
    collector = ErrorCollector(filename)
    root = load_yaml(text, collector)
    site = _Parser(collector).parse(root, text, filename) if root is not None else None
    collector.raise_if_any()
    assert site is not None
    return site


class _Parser:
    TOP = ("appliance", "simulation", "defaults", "networks", "fabric", "switches", "nodes", "filesystems", "pools",
           "package_repository", "ssh", "telemetry")

    def __init__(self, collector: ErrorCollector):
        self.collector = collector
        self.platform_cache: dict[str, object] = {}
        self.declared_nodes: dict[str, dict] = {}  # name -> {"role", "platform"}, None where invalid
        self.simulation = False
        self.credential_endpoints: dict[str, list[str] | None] = {}  # name -> bound endpoints, None if unknown
        self.maintenance_settings: dict = {}

    def parse(self, root: Cursor, text: str, filename: str) -> SiteDefinition | None:
        top = root.mapping(self.TOP, required=("appliance", "nodes"))
        if top is None:
            return None
        name, description = self.appliance(top.get("appliance"))
        simulation = top["simulation"].boolean() if "simulation" in top else False
        self.simulation = bool(simulation)
        bmc_defaults = self.defaults(top.get("defaults"))
        networks = self.networks(top.get("networks"))
        nodes = self.nodes(top.get("nodes"), bmc_defaults, networks)
        # Later sections check names against every node the file declares, even one with errors,
        # so that a mistake in a node is reported once, not again by each pool naming it.
        node_names = self.declared_nodes
        fabric = self.fabric(top.get("fabric"), node_names)
        switches = self.switches(top.get("switches"), nodes)
        filesystems = self.filesystems(top.get("filesystems"), node_names)
        pools = self.pools(top.get("pools"), node_names)
        package_repository = self.package_repository(top.get("package_repository"), networks)
        ssh = self.ssh(top.get("ssh"))
        telemetry = self.telemetry(top.get("telemetry"))
        if name is None:
            return None
        return SiteDefinition(
            filename=filename, sha256=hashlib.sha256(text.encode()).hexdigest(), name=name,
            description=description, simulation=bool(simulation), fabric=fabric,
            networks=[n for n, _ in networks.values()], nodes=nodes, switches=switches,
            filesystems=filesystems, pools=pools, package_repository=package_repository, ssh=ssh,
            telemetry=telemetry, platforms={slug: spec for slug, spec in self.platform_cache.items() if spec is not None},
            maintenance=self.maintenance_settings,
            lines={key: cursor.line for key, cursor in top.items()})

    # sections

    def appliance(self, cursor: Cursor | None) -> tuple[str | None, str]:
        if cursor is None:
            return None, ""
        fields = cursor.mapping(("name", "description", "maintenance"), required=("name",))
        if fields is None:
            return None, ""
        if "maintenance" in fields:
            self.maintenance_settings = self.maintenance(fields["maintenance"])
        name = fields["name"].text(SLUG, "a name (lower-case letters, digits, '-' and '_')") if "name" in fields else None
        description = (fields["description"].text() or "") if "description" in fields else ""
        return name, description

    def maintenance(self, cursor: Cursor) -> dict:
        """appliance.maintenance: when the firmware stage may restart servers to apply staged BIOS values
        (window: {days, start, end, timezone}) and how long it waits for one (reset_timeout, seconds).
        The window's rules are the redfish_reset module's own (module_utils/appliance_window.py)."""
        fields = cursor.mapping(("window", "reset_timeout"))
        if fields is None:
            return {}
        values = {}
        if "reset_timeout" in fields:
            timeout = fields["reset_timeout"].integer(minimum=30, maximum=86400)
            if timeout is not None:
                values["reset_timeout"] = timeout
        if "window" in fields:
            window = to_plain(fields["window"].value)
            problems = window_rules().problems(window)
            for problem in problems:
                key, _, message = problem.partition(": ")
                if isinstance(window, dict) and key in window:
                    fields["window"].child(key).error(message)
                else:
                    fields["window"].error(problem)
            if not problems:
                values["window"] = window
        return values

    def defaults(self, cursor: Cursor | None) -> dict:
        if cursor is None:
            return {}
        fields = cursor.mapping(("bmc",))
        if not fields or "bmc" not in fields:
            return {}
        bmc = self.bmc_mapping(fields["bmc"], ("credential", "verify_tls")) or {}
        values = self.bmc_values(bmc)
        # A default given with an error was reported once, here: nodes relying on it stay quiet.
        return {key: values.get(key, _MISSING) for key in bmc}

    @staticmethod
    def bmc_mapping(cursor: Cursor, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict | None:
        """Like Cursor.mapping, keeping the retired keys (for their own error) out of the allowed list shown."""
        fields = cursor.mapping()
        if fields is None:
            return None
        for key in list(fields):
            if key not in allowed and key not in RETIRED_BMC_KEYS:
                fields.pop(key).error(f"unknown key (allowed here: {', '.join(allowed)})")
        for key in required:
            if key not in fields:
                cursor.missing(key)
        return fields

    def bmc_values(self, fields: dict) -> dict:
        """The checked BMC settings present in `fields` (errors reported, bad values left out)."""
        values = {}
        if "url" in fields:
            values["url"] = self.bmc_url(fields["url"])
        if "credential" in fields:
            values["credential"] = self.credential(fields["credential"])
        if "verify_tls" in fields:
            values["verify_tls"] = fields["verify_tls"].boolean()
            if values["verify_tls"] is False and not self.simulation:
                fields["verify_tls"].error("TLS verification of a BMC is turned off only on a simulated appliance "
                                           "(simulation: true)")
                values["verify_tls"] = None
        for key, message in RETIRED_BMC_KEYS.items():
            if key in fields:
                fields[key].error(message)
        return {k: v for k, v in values.items() if v is not None}

    def bmc_url(self, cursor: Cursor) -> str | None:
        url = cursor.url()
        if url is not None and urlsplit(url).scheme != "https" and not self.simulation:
            cursor.error(f"{url!r}: a BMC is reached over https on a real appliance (http only with simulation: true)")
            return None
        return url

    def package_repository(self, cursor: Cursor | None, networks: dict) -> dict:
        """Where the nodes install from (README "Air-gapped installs"): https anywhere, http only to an
        address of a management network (or loopback, on a simulated appliance)."""
        if cursor is None:
            return {}
        fields = cursor.mapping(("url",), required=("url",))
        if not fields or "url" not in fields:
            return {}
        url = fields["url"].url()
        if url is None:
            return {}
        if urlsplit(url).scheme == "http":
            host = urlsplit(url).hostname or ""
            try:
                address = ipaddress.ip_address(host)
            except ValueError:
                address = None
            subnets = [ipaddress.ip_network(network.cidr) for network, _ in networks.values()
                       if network.kind == "management" and network.cidr]
            allowed = any(address in subnet for subnet in subnets) if address else False
            if not allowed and not (self.simulation and address is not None and address.is_loopback):
                where = ", ".join(str(subnet) for subnet in subnets) or "none declared"
                fields["url"].error(f"{url!r}: an http repository must be an address of a management network "
                                    f"({where}); use https for any other host")
                return {}
        return {"url": url}

    def ssh(self, cursor: Cursor | None) -> dict:
        """How Ansible reaches the (real) nodes (README "The simulated nodes' SSH"): login name, the
        appliance's private key and the known_hosts file (absolute paths on the controller), port, become
        and the nodes' Python (an absolute path, or Ansible's discovery `auto_silent`/`auto`)."""
        if cursor is None:
            return {}
        fields = cursor.mapping(("user", "private_key_file", "known_hosts", "port", "become_method", "become_user",
                                 "python"))
        if not fields:
            return {}
        values = {}
        for key in ("user", "become_user"):
            if key in fields:
                values[key] = fields[key].text(UNIX_USER, "a user name (lower-case letters, digits, '_' and '-', "
                                                          "at most 32)")
        for key in ("private_key_file", "known_hosts"):
            if key in fields:
                values[key] = fields[key].text(ABSOLUTE_PATH, "an absolute path on the controller")
        if "port" in fields:
            values["port"] = fields["port"].integer(1, 65535)
        if "become_method" in fields:
            values["become_method"] = fields["become_method"].choice(BECOME_METHODS)
        if "python" in fields:
            python = fields["python"].text()
            if python is not None and python not in ("auto_silent", "auto") and not ABSOLUTE_PATH.fullmatch(python):
                fields["python"].error(f"{python!r}: an absolute path to the nodes' Python, or auto_silent")
                python = None
            values["python"] = python
        return {key: value for key, value in values.items() if value is not None}

    def telemetry(self, cursor: Cursor | None) -> dict:
        """The nodes' collectors (the monitoring stage): sweep interval (0.1 to 3600 s), the appliance's ingest
        URL (http or https; default: the first management node's portal), the /metrics port, the disk
        buffer's bound, and the site's own InfluxDB for raw points (url, org, bucket, token_credential). The
        URLs are where the nodes send their tokens: each must be an endpoint an Administrator allowed
        (appliance.inventory.credentials), whoever imports the site."""
        if cursor is None:
            return {}
        fields = cursor.mapping(("interval_s", "ingest_url", "metrics_port", "buffer_max_mib", "influxdb"))
        if not fields:
            return {}
        values: dict = {}
        if "interval_s" in fields:
            values["interval_s"] = self.number(fields["interval_s"], 0.1, 3600.0)
        if "ingest_url" in fields:
            url = fields["ingest_url"].url()
            if url is not None and (urlsplit(url).query or urlsplit(url).fragment):
                fields["ingest_url"].error(f"{url!r}: the ingest URL takes no query or fragment "
                                           "(the collectors add /api/v2/write?...)")
                url = None
            if url is not None:
                url = self.allowed_ingest_url(fields["ingest_url"], url)
            values["ingest_url"] = url
        if "metrics_port" in fields:
            values["metrics_port"] = fields["metrics_port"].integer(1, 65535)
        if "buffer_max_mib" in fields:
            values["buffer_max_mib"] = fields["buffer_max_mib"].integer(16, 65536)
        if "influxdb" in fields:
            influxdb = fields["influxdb"].mapping(("url", "org", "bucket", "token_credential"), required=("url",))
            if influxdb:
                site_influxdb = {}
                if "url" in influxdb:
                    site_influxdb["url"] = influxdb["url"].url()
                for key in ("org", "bucket"):
                    if key in influxdb:
                        site_influxdb[key] = influxdb[key].text(INFLUX_NAME, "an InfluxDB organisation or bucket "
                                                                            "name (letters, digits, '-', '_', '.')")
                if "token_credential" in influxdb:
                    site_influxdb["token_credential"] = influxdb["token_credential"].text(NAME, "a credential name")
                if site_influxdb.get("url") is not None and site_influxdb.get("token_credential") is not None:
                    self.allowed_influxdb_url(influxdb, site_influxdb)
                elif site_influxdb.get("url") is not None and "token_credential" not in influxdb:
                    influxdb["url"].error(f"{site_influxdb['url']}: the collectors write to an InfluxDB only with "
                                          "a token an Administrator bound to its endpoint: name that credential in "
                                          f"token_credential ({resources.program()} credential create NAME --kind influxdb "
                                          "--endpoint URL)")
                    site_influxdb["url"] = None
                if all(value is not None for value in site_influxdb.values()):
                    values["influxdb"] = site_influxdb
        return {key: value for key, value in values.items() if value is not None}

    @staticmethod
    def allowed_ingest_url(cursor: Cursor, url: str) -> str | None:
        """The site's ingest URL if the nodes' ingest tokens may be sent there (an Administrator's allow-list,
        whoever imports the site)."""
        from .credentials import ingest_url_refusal

        refusal = ingest_url_refusal(url)
        if refusal:
            cursor.error(refusal)
            return None
        return url

    @staticmethod
    def allowed_influxdb_url(cursors: dict, values: dict) -> None:
        """The site's InfluxDB URL and token credential, kept if the credential is an InfluxDB token bound to
        the URL's endpoint (an Administrator's allow-list, whoever imports the site); the field at fault is
        named and set to None otherwise."""
        from .credentials import influxdb_token_refusal

        field_name, refusal = influxdb_token_refusal(values["token_credential"], values["url"])
        if refusal:
            cursors[field_name].error(refusal)
            values[field_name] = None

    @staticmethod
    def number(cursor: Cursor, minimum: float, maximum: float) -> float | None:
        value = cursor.value
        if not isinstance(value, int | float) or isinstance(value, bool):
            cursor.error(f"expected a number, got {_type_name(value)}")
            return None
        if not minimum <= float(value) <= maximum:
            cursor.error(f"{value} is out of range (must be between {minimum:g} and {maximum:g})")
            return None
        return float(value)

    def credential(self, cursor: Cursor) -> str | None:
        """The name of an existing BMC credential (the store is read, never a file or a variable)."""
        name = cursor.text(NAME, "a credential name")
        if name is None:
            return None
        if name not in self.credential_endpoints:
            from .models import Credential

            self.credential_endpoints[name] = (Credential.objects.filter(name=name, kind=Credential.Kind.BMC)
                                               .values_list("endpoints", flat=True).first())
        if self.credential_endpoints[name] is None:
            cursor.error(f"unknown credential {name!r} (an Administrator creates it: {resources.program()} credential create)")
            return None
        return name

    def networks(self, cursor: Cursor | None) -> dict[str, tuple[NetworkDef, object]]:
        """name -> (definition, ip_network)."""
        result: dict[str, tuple[NetworkDef, object]] = {}
        first_line: dict[str, int] = {}
        for item in (cursor.sequence() if cursor else None) or []:
            fields = item.mapping(("name", "kind", "cidr", "pkey", "mtu"), required=("name", "kind", "cidr"))
            if fields is None:
                continue
            name = fields["name"].text(SLUG, "a name") if "name" in fields else None
            kind = fields["kind"].choice(NETWORK_KINDS) if "kind" in fields else None
            network = fields["cidr"].cidr() if "cidr" in fields else None
            pkey = ""
            if "pkey" in fields:
                pkey = self.pkey(fields["pkey"]) or ""
                if kind and kind != "ipoib":
                    fields["pkey"].error("a partition key belongs to an ipoib network only")
            mtu = fields["mtu"].integer(576, 65520) if "mtu" in fields else None
            if kind == "ipoib" and "pkey" not in fields:
                item.missing("pkey", " (ipoib networks name their InfiniBand partition, e.g. 0x7fff)")
            if name in first_line:
                fields["name"].error(f"duplicate network name {name!r} (first at line {first_line[name]})")
                continue
            if name is None or kind is None or network is None:
                continue
            first_line[name] = fields["name"].line
            result[name] = (NetworkDef(name, kind, str(network), pkey, mtu), network)
        management = [n for n, (d, _) in result.items() if d.kind == "management"]
        if len(management) > 1:
            cursor.error(f"more than one management network ({', '.join(management)})")
        return result

    def pkey(self, cursor: Cursor) -> str | None:
        value = cursor.value
        if isinstance(value, int) and not isinstance(value, bool):
            number = int(value)
        elif isinstance(value, str) and PKEY.fullmatch(value.strip()):
            number = int(value.strip(), 16)
        else:
            cursor.error(f"{value!r} is not a partition key (expected hexadecimal like 0x7fff)")
            return None
        if not 0x0001 <= number <= 0xFFFF or number & 0x7FFF == 0:
            cursor.error(f"partition key {number:#06x} is out of range (0x0001-0x7fff, full membership bit allowed)")
            return None
        return f"{number:#06x}"

    def platform(self, cursor: Cursor):
        from . import platforms

        slug = cursor.text()
        if slug is None:
            return None
        if slug not in self.platform_cache:
            try:
                self.platform_cache[slug] = platforms.load_platform(slug)
            except LookupError as exc:
                self.platform_cache[slug] = None
                cursor.error(str(exc.args[0]))
                return None
            except SiteValidationError as exc:
                self.platform_cache[slug] = None
                self.collector.errors.extend(exc.errors)
                cursor.error(f"platform {slug!r} is invalid (errors listed for its file)")
                return None
        return self.platform_cache[slug]

    def nodes(self, cursor: Cursor | None, bmc_defaults: dict, networks: dict) -> list[NodeDef]:
        nodes: list[NodeDef] = []
        seen: dict[str, dict[str, str]] = {"name": {}, "address": {}, "bmc": {}, "ipoib": {}}
        management_net = next((net for d, net in networks.values() if d.kind == "management"), None)
        items = (cursor.sequence() if cursor else None) or []
        if cursor is not None and isinstance(cursor.value, list) and not items:
            cursor.error("an appliance has at least one node")
        for index, item in enumerate(items):
            fields = item.mapping(("name", "role", "platform", "gpus", "management_address", "bmc", "ipoib", "labels"),
                                  required=("name", "role", "platform", "management_address", "bmc"))
            if fields is None:
                continue
            where = f"nodes[{index}], line {item.line}"
            name = fields["name"].text(NAME, NAME_WHAT) if "name" in fields else None
            if name is not None:
                if name in seen["name"]:
                    fields["name"].error(f"duplicate node name {name!r} (also {seen['name'][name]})")
                else:
                    seen["name"][name] = where
            role = fields["role"].choice(NODE_ROLES) if "role" in fields else None
            spec = self.platform(fields["platform"]) if "platform" in fields else None
            if name is not None:
                self.declared_nodes.setdefault(name, {"role": role, "platform": spec.slug if spec else None})
            if spec is not None:
                if "gpus" in fields:
                    declared = fields["gpus"].integer(minimum=0)
                    if declared is not None and declared != spec.gpu_count:
                        fields["gpus"].error(f"{declared} GPUs contradicts platform {spec.slug}, which has {spec.gpu_count}")
                if role == "gpu" and spec.gpu_count == 0:
                    fields["platform"].error(f"a gpu node needs a platform with GPUs; {spec.slug} has none")
            elif "gpus" in fields:
                fields["gpus"].integer(minimum=0)

            address = fields["management_address"].ip_address() if "management_address" in fields else None
            if address is not None:
                if str(address) in seen["address"]:
                    fields["management_address"].error(
                        f"duplicate management address {address} (also {seen['address'][str(address)]})")
                else:
                    seen["address"][str(address)] = where
                if management_net is not None and address not in management_net:
                    fields["management_address"].error(f"{address} is outside the management network {management_net}")

            bmc = self.node_bmc(fields.get("bmc"), bmc_defaults)
            if bmc is not None:
                if bmc.url in seen["bmc"]:
                    fields["bmc"].child("url").error(f"duplicate BMC URL {bmc.url} (also {seen['bmc'][bmc.url]})")
                else:
                    seen["bmc"][bmc.url] = where

            ipoib = self.node_ipoib(fields.get("ipoib"), networks, seen["ipoib"], where)
            labels = (self.labels(fields["labels"]) if "labels" in fields else {}) or {}
            if None in (name, role, spec, address, bmc, ipoib):
                continue
            nodes.append(NodeDef(name=name, role=role, platform=spec.slug, management_address=str(address),
                                 bmc=bmc, ipoib=ipoib, labels=labels, line=item.line))
        return nodes

    @staticmethod
    def labels(cursor: Cursor) -> dict | None:
        values = cursor.scalar_mapping()
        if values is None:
            return None
        problems = {key: sitevalues.label_problem(key, value) for key, value in values.items()}
        for key, value_cursor in (cursor.mapping() or {}).items():
            if problems.get(key):
                value_cursor.error(problems[key])
        return None if any(problems.values()) else values

    def node_bmc(self, cursor: Cursor | None, bmc_defaults: dict) -> BMCDef | None:
        if cursor is None:
            return None
        fields = self.bmc_mapping(cursor, ("url", "credential", "verify_tls"), required=("url",))
        if fields is None:
            return None
        given = self.bmc_values(fields)
        values = {**bmc_defaults, **given}
        complete = all(key in given for key in fields)
        if "credential" not in fields and "credential" not in bmc_defaults:
            cursor.missing("credential", " (give it here or in defaults.bmc)")
            complete = False
        if not complete or _MISSING in values.values():
            return None
        url, credential = values["url"], values["credential"]
        if endpoint_of(url) not in self.credential_endpoints[credential]:
            fields["url"].error(f"credential {credential} is not bound to {endpoint_of(url)} (an Administrator "
                                f"binds it: {resources.program()} credential bind {credential} {endpoint_of(url)})")
            return None
        return BMCDef(url=url, credential=credential, verify_tls=values.get("verify_tls", True), line=fields["url"].line)

    def node_ipoib(self, cursor: Cursor | None, networks: dict, seen: dict, where: str) -> dict | None:
        if cursor is None:
            return {}
        fields = cursor.mapping()
        if fields is None:
            return None
        result, ok = {}, True
        for network_name, value in fields.items():
            address = value.ip_address()
            if address is None:
                ok = False
                continue
            if network_name not in networks or networks[network_name][0].kind != "ipoib":
                known = [n for n, (d, _) in networks.items() if d.kind == "ipoib"]
                value.error(f"unknown ipoib network {network_name!r} (networks: {', '.join(known) or 'none'})")
                ok = False
                continue
            if address not in networks[network_name][1]:
                value.error(f"{address} is outside network {network_name} ({networks[network_name][1]})")
                ok = False
                continue
            if str(address) in seen:
                value.error(f"duplicate address {address} (also {seen[str(address)]})")
                ok = False
                continue
            seen[str(address)] = where
            result[network_name] = str(address)
        return result if ok else None

    def fabric(self, cursor: Cursor | None, nodes: dict[str, dict]) -> dict:
        if cursor is None:
            return {}
        fields = cursor.mapping(("subnet_manager",))
        if not fields or "subnet_manager" not in fields:
            return {}
        sm_cursor = fields["subnet_manager"]
        sm = sm_cursor.mapping(("kind", "node", "priority"), required=("kind",))
        if sm is None or "kind" not in sm:
            return {}
        kind = sm["kind"].choice(SUBNET_MANAGERS)
        if kind is None:
            return {}
        result: dict = {"subnet_manager": {"kind": kind}}
        if kind == "opensm":
            node = sm_cursor.require(sm, "node")
            node_name = node.text() if node else None
            if node_name is not None:
                if node_name not in nodes:
                    node.error(f"unknown node {node_name!r}")
                else:
                    spec = self.platform_cache.get(nodes[node_name]["platform"] or "")
                    if spec is not None and not spec.ports:
                        node.error(f"node {node_name} has no InfiniBand port to run opensm on")
                result["subnet_manager"]["node"] = node_name
            priority = (sm["priority"].integer(OPENSM_PRIORITY_MIN, OPENSM_PRIORITY_MAX) if "priority" in sm
                        else DEFAULT_OPENSM_PRIORITY)
            result["subnet_manager"]["priority"] = priority
        elif kind == "external":
            for key in ("node", "priority"):
                if key in sm:
                    sm[key].error("only an opensm subnet manager runs on a node of the appliance")
        return result

    def switches(self, cursor: Cursor | None, nodes: list[NodeDef]) -> list[SwitchDef]:
        result: list[SwitchDef] = []
        names: dict[str, int] = {}
        addresses = {n.management_address: f"node {n.name}" for n in nodes}
        for item in (cursor.sequence() if cursor else None) or []:
            fields = item.mapping(("name", "kind", "model", "tier", "management_address", "ports"),
                                  required=("name", "kind"))
            if fields is None:
                continue
            name = fields["name"].text(NAME, NAME_WHAT) if "name" in fields else None
            if name in names:
                fields["name"].error(f"duplicate switch name {name!r} (first at line {names[name]})")
                name = None
            elif name is not None:
                names[name] = fields["name"].line
            kind = fields["kind"].choice(SWITCH_KINDS) if "kind" in fields else None
            model = (fields["model"].text() or "") if "model" in fields else ""
            tier = (fields["tier"].text() or "") if "tier" in fields else ""
            ports = fields["ports"].integer(1, 2048) if "ports" in fields else 0
            address = None
            if "management_address" in fields:
                parsed = fields["management_address"].ip_address()
                if parsed is not None and str(parsed) in addresses:
                    fields["management_address"].error(f"duplicate management address {parsed} (also {addresses[str(parsed)]})")
                elif parsed is not None:
                    address = str(parsed)
                    addresses[address] = f"switch {name}"
            if name is None or kind is None or ports is None:
                continue
            result.append(SwitchDef(name, kind, model, tier, address, ports))
        return result

    def filesystems(self, cursor: Cursor | None, nodes: dict[str, dict]) -> list[FilesystemDef]:
        result: list[FilesystemDef] = []
        names: dict[str, int] = {}
        mounts: dict[str, int] = {}
        for item in (cursor.sequence() if cursor else None) or []:
            fields = item.mapping(("name", "type", "servers", "source", "mount_point", "options", "tunables"),
                                  required=("name", "type", "source", "mount_point"))
            if fields is None:
                continue
            name = fields["name"].text(SLUG, "a name") if "name" in fields else None
            if name in names:
                fields["name"].error(f"duplicate filesystem name {name!r} (first at line {names[name]})")
                name = None
            elif name is not None:
                names[name] = fields["name"].line
            fs_type = fields["type"].choice(FILESYSTEM_TYPES) if "type" in fields else None
            source = fields["source"].text() if "source" in fields else None
            if source is not None and fs_type is not None:
                source = self.checked(fields["source"], source, sitevalues.source_problem(fs_type, source))
            mount = None
            if "mount_point" in fields:
                mount = fields["mount_point"].text()
                if mount is not None:
                    mount = self.checked(fields["mount_point"], mount, sitevalues.mount_point_problem(mount))
                if mount in mounts:
                    fields["mount_point"].error(f"mount point {mount} is already used (line {mounts[mount]})")
                    mount = None
                elif mount is not None:
                    mounts[mount] = fields["mount_point"].line
            servers: list[str] | None = []
            if "servers" in fields:
                servers = fields["servers"].text_list()
                for i, server in enumerate(servers or []):
                    if server not in nodes:
                        fields["servers"].child(i).error(f"unknown node {server!r}")
                        servers = None
                        break
            options = self.mount_options(fields["options"], fs_type) if "options" in fields else []
            tunables = self.fs_tunables(fields["tunables"], fs_type) if "tunables" in fields else {}
            if None in (name, fs_type, source, mount, servers, options, tunables):
                continue
            result.append(FilesystemDef(name, fs_type, servers, source, mount, options, tunables))
        return result

    @staticmethod
    def checked(cursor: Cursor, value, problem: str | None):
        """`value`, or None after reporting `problem` against `cursor`."""
        if problem:
            cursor.error(problem)
            return None
        return value

    def mount_options(self, cursor: Cursor, fs_type: str | None) -> list[str] | None:
        """Mount options (a list, or "a,b,c") each known to the filesystem type's catalogue (tunables.py)."""
        options = cursor.text_list(split_commas=True)
        if options is None or fs_type is None:
            return options
        # A list reports each option on its own line; "a,b,c" reports them against the field.
        cursors = cursor.sequence() if isinstance(cursor.value, list) else [cursor] * len(options)
        problems = [(c, tunables.mount_option_problem(fs_type, o)) for c, o in zip(cursors, options, strict=True)]
        for option_cursor, problem in problems:
            if problem:
                option_cursor.error(problem)
        return None if any(problem for _, problem in problems) else options

    def fs_tunables(self, cursor: Cursor, fs_type: str | None) -> dict | None:
        """Tunables by name, each from the filesystem type's catalogue with a value of its type (tunables.py)."""
        values = cursor.scalar_mapping()
        if values is None or fs_type is None:
            return values
        problems = {key: tunables.tunable_problem(fs_type, key, value) for key, value in values.items()}
        for key, value_cursor in (cursor.mapping() or {}).items():
            if problems.get(key):
                value_cursor.error(problems[key])
        return None if any(problems.values()) else values

    def pools(self, cursor: Cursor | None, nodes: dict[str, dict]) -> list[PoolDef]:
        result: list[PoolDef] = []
        names: dict[str, int] = {}
        member_of: dict[str, str] = {}
        for item in (cursor.sequence() if cursor else None) or []:
            fields = item.mapping(("name", "kind", "nodes", "settings"), required=("name", "kind", "nodes"))
            if fields is None:
                continue
            name = fields["name"].text(SLUG, "a name") if "name" in fields else None
            if name in names:
                fields["name"].error(f"duplicate pool name {name!r} (first at line {names[name]})")
                name = None
            elif name is not None:
                names[name] = fields["name"].line
            kind = fields["kind"].choice(POOL_KINDS) if "kind" in fields else None
            members: list[str] | None = None
            if "nodes" in fields:
                members = fields["nodes"].text_list()
                for i, member in enumerate(members or []):
                    member_cursor = fields["nodes"].child(i)
                    if member not in nodes:
                        member_cursor.error(f"unknown node {member!r}")
                        members = None
                    elif nodes[member]["role"] not in ("gpu", None):
                        member_cursor.error(f"node {member} is a {nodes[member]['role']} node; pools hold GPU nodes")
                        members = None
                    elif member in member_of:
                        member_cursor.error(f"node {member} is already in pool {member_of[member]}: a node serves one pool")
                        members = None
                    else:
                        member_of[member] = name or f"pools[{len(result)}]"
            settings_value = self.pool_settings(fields.get("settings"), kind)
            if None in (name, kind, members, settings_value):
                continue
            result.append(PoolDef(name, kind, members, settings_value))
        return result

    def pool_settings(self, cursor: Cursor | None, kind: str | None) -> dict | None:
        """Scheduler settings: the keys the suite renders (sitevalues.POOL_SETTINGS), each of its type."""
        if cursor is None:
            return {}
        fields = cursor.mapping(sitevalues.POOL_SETTINGS)
        if fields is None:
            return None
        ok = len(fields) == len(cursor.value)
        if "partition" in fields and fields["partition"].text(NAME, "a Slurm partition name") is None:
            ok = False
        if "max_time" in fields:
            max_time = fields["max_time"]
            if isinstance(max_time.value, int) and not isinstance(max_time.value, bool):
                ok = max_time.integer(1, 10**6) is not None and ok  # minutes
            elif max_time.text(sitevalues.SLURM_TIME, "a Slurm time limit (minutes, [D-]HH:MM:SS or INFINITE)") is None:
                ok = False
        if "mig_strategy" in fields and fields["mig_strategy"].choice(sitevalues.MIG_STRATEGIES) is None:
            ok = False
        if "mig_config" in fields and fields["mig_config"].text(
                sitevalues.MIG_CONFIG, "a mig-parted configuration name (e.g. all-1g.10gb)") is None:
            ok = False
        if "time_slicing" in fields:
            if kind == "training":
                fields["time_slicing"].error("training pools give whole GPUs to one job; time-slicing is for inference pools")
                ok = False
            else:
                slicing = fields["time_slicing"].mapping(("replicas",))
                if slicing is None or len(slicing) != len(fields["time_slicing"].value):
                    ok = False
                elif "replicas" not in slicing:
                    fields["time_slicing"].missing("replicas")
                    ok = False
                elif slicing["replicas"].integer(2, 64) is None:
                    ok = False
        return to_plain(cursor.value) if ok else None
