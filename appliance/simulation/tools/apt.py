"""apt-get (update, install, remove, purge; -s simulates) and dpkg-query (-W with -f/--showformat).

Where packages come from. A factory image has never run `apt-get update` here: it installs from the
simulation's whole catalogue (packages.py), as an image still pointing at Ubuntu's archive would.
Once `apt-get update` has run, only the repositories of the node's apt sources count, exactly as on
a real node: `update` fetches each source's Release and Packages index over HTTP (the Packages index
checked against the Release's SHA-256) into /var/lib/apt/lists, `install` refuses a package those
indexes do not list ("Unable to locate package") and downloads each .deb it installs, checking its
size and SHA-256 against the index. That is how an air-gapped node behaves once the package_sources
role has pointed it at the appliance's own repository.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.error
import urllib.parse
import urllib.request

from .. import packages


class AptError(Exception):
    pass


LISTS_DIR = "/var/lib/apt/lists"
# Which repository each fetched index came from (apt keeps this in the list file names).
SOURCES_FILE = "appliance-sim-sources.json"
ARCHITECTURE = "amd64"
SOURCE_LINE = re.compile(r"^deb\s+(?:\[(?P<options>[^\]]*)\]\s+)?(?P<uri>\S+)\s+(?P<suite>\S+)(?P<components>(?:\s+\S+)*)\s*$")


def _parse_stanzas(text: str) -> list[dict[str, str]]:
    stanzas, current, key = [], {}, None
    for line in text.splitlines():
        if not line.strip():
            if current:
                stanzas.append(current)
            current, key = {}, None
        elif line[0] in " \t" and key:
            current[key] += "\n" + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            current[key] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def _fetch(url: str) -> bytes:
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise AptError(f"E: The method driver for {url} could not be found (the simulated apt fetches http and https)")
    try:
        with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 (scheme checked above)
            return response.read()
    except urllib.error.HTTPError as exc:
        raise AptError(f"E: Failed to fetch {url}  {exc.code} {exc.reason}") from None
    except OSError as exc:
        raise AptError(f"E: Failed to fetch {url}  {getattr(exc, 'reason', exc)}") from None


def sources(tool) -> list[tuple[str, str, list[str]]]:
    """(uri, suite, components) of every `deb` line in the node's sources.list and sources.list.d/*.list."""
    files = [tool.path("/etc/apt/sources.list")]
    directory = tool.path("/etc/apt/sources.list.d")
    if directory.is_dir():
        files += sorted(directory.glob("*.list"))
    found = []
    for file in files:
        if not file.is_file():
            continue
        for number, line in enumerate(file.read_text().splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line or line.startswith("deb-src"):
                continue
            match = SOURCE_LINE.match(line)
            if match is None:
                raise AptError(f"E: Malformed entry {number} in list file {file.name} (Component)")
            components = match["components"].split()
            if not components:
                raise AptError(f"E: Malformed entry {number} in list file {file.name} (Component)")
            found.append((match["uri"].rstrip("/"), match["suite"], components))
    return found


def _list_name(uri: str, suite: str, component: str) -> str:
    parts = urllib.parse.urlsplit(uri)
    return "_".join(filter(None, [parts.netloc, *parts.path.strip("/").split("/"), "dists", suite, component,
                                  f"binary-{ARCHITECTURE}", "Packages"]))


def update(tool) -> list[str]:
    """Fetch every source's index into the lists directory, replacing what was there."""
    lists = tool.path(LISTS_DIR)
    lists.mkdir(parents=True, exist_ok=True)
    fetched, lines = {}, []
    for uri, suite, components in sources(tool):
        release_text = _fetch(f"{uri}/dists/{suite}/Release").decode()
        lines.append(f"Get: {uri} {suite} InRelease")
        release = (_parse_stanzas(release_text) or [{}])[0]
        checksums = {}
        for entry in release.get("SHA256", "").splitlines():
            fields = entry.split()
            if len(fields) == 3:
                checksums[fields[2]] = (fields[0], int(fields[1]))
        for component in components:
            index = f"{component}/binary-{ARCHITECTURE}/Packages"
            if index not in checksums:
                raise AptError(f"E: {uri} {suite} Release: no {index} index listed")
            data = _fetch(f"{uri}/dists/{suite}/{index}")
            if (hashlib.sha256(data).hexdigest(), len(data)) != checksums[index]:
                raise AptError(f"E: Failed to fetch {uri}/dists/{suite}/{index}  Hash Sum mismatch")
            name = _list_name(uri, suite, component)
            (lists / name).write_bytes(data)
            fetched[name] = uri
            lines.append(f"Get: {uri} {suite}/{component} {ARCHITECTURE} Packages [{len(data)} B]")
    for stale in lists.glob("*_Packages"):
        if stale.name not in fetched:
            stale.unlink()
    (lists / SOURCES_FILE).write_text(json.dumps(fetched, indent=1, sort_keys=True) + "\n")
    return lines


def repository_index(tool) -> dict[str, list[dict]] | None:
    """name -> index entries (each with its repository's "uri") once `apt-get update` has run; None before."""
    lists = tool.path(LISTS_DIR)
    try:
        origins = json.loads((lists / SOURCES_FILE).read_text())
    except FileNotFoundError:
        return None
    index: dict[str, list[dict]] = {}
    for name, uri in origins.items():
        for entry in _parse_stanzas((lists / name).read_text()):
            if "Package" in entry and entry.get("Architecture") in (ARCHITECTURE, "all"):
                index.setdefault(entry["Package"], []).append({**entry, "uri": uri})
    return index


def _version_matches(pinned: str, candidate: str) -> bool:
    return (pinned == candidate or pinned.startswith(candidate.split(":")[-1] + "-")
            or pinned.split(":")[-1].startswith(candidate.split(":")[-1]))


def _version_key(version: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", version.split(":")[-1])]


def _candidate(state: dict, name: str, pinned: str, index: dict | None) -> tuple[str, dict | None]:
    """The version to install and, from a repository, its index entry."""
    package = packages.find(name)
    if index is None:
        if package is None:
            raise AptError(f"E: Unable to locate package {name}")
        candidate = packages.candidate_version(package, state.get("software", {}))
        if pinned and not _version_matches(pinned, candidate):
            raise AptError(f"E: Version '{pinned}' for '{name}' was not found (candidate: {candidate})")
        return pinned or candidate, None
    entries = index.get(name)
    if not entries or package is None:
        raise AptError(f"E: Unable to locate package {name}")
    if pinned:
        matching = [entry for entry in entries if _version_matches(pinned, entry["Version"])]
        if not matching:
            listed = ", ".join(sorted(entry["Version"] for entry in entries))
            raise AptError(f"E: Version '{pinned}' for '{name}' was not found (the repository has {listed})")
        return pinned, matching[0]
    # A repository built for several platforms may hold several versions: this platform's, else the newest.
    wanted = packages.candidate_version(package, state.get("software", {}))
    chosen = next((entry for entry in entries if entry["Version"] == wanted), None)
    chosen = chosen or max(entries, key=lambda entry: _version_key(entry["Version"]))
    return chosen["Version"], chosen


def _resolve(state: dict, requests: list[str], index: dict | None) -> list[tuple[str, str, dict | None]]:
    """(name, version, index entry) for each requested package and its dependencies, in install order."""
    plan: list[tuple[str, str, dict | None]] = []
    for request in requests:
        name, _, pinned = request.partition("=")
        if index is not None and name in state["packages"] and not pinned and name not in index:
            # Installed from the factory image, no longer in any source: apt keeps it and says so.
            plan.append((name, state["packages"][name], None))
            continue
        version, entry = _candidate(state, name, pinned, index)
        for dependency in packages.find(name).depends:
            if dependency not in state["packages"] and all(dependency != planned for planned, _, _ in plan):
                plan += _resolve(state, [dependency], index)
        plan.append((name, version, entry))
    return plan


def _download(entry: dict) -> None:
    """Fetch the .deb as apt does, and check it against the index that listed it."""
    url = f"{entry['uri']}/{entry['Filename']}"
    data = _fetch(url)
    if len(data) != int(entry.get("Size", -1)) or hashlib.sha256(data).hexdigest() != entry.get("SHA256"):
        raise AptError(f"E: Failed to fetch {url}  Hash Sum mismatch")


def install(state: dict, requests: list[str], index: dict | None = None, download: bool = True) -> list[str]:
    lines = []
    for name, version, entry in _resolve(state, requests, index):
        if state["packages"].get(name) == version:
            lines.append(f"{name} is already the newest version ({version}).")
            continue
        if entry is not None and download:
            _download(entry)
            lines.append(f"Get: {entry['uri']} {name} {ARCHITECTURE} {version} [{entry.get('Size', '?')} B]")
        package = packages.find(name)
        for conflict in package.conflicts:
            if conflict in state["packages"]:
                remove(state, [conflict])
                lines.append(f"Removing {conflict} ...")
        state["packages"][name] = version
        lines.append(f"Setting up {name} ({version}) ...")
        for unit in package.units:
            state["services"].setdefault(unit, {"enabled": False, "active": False})
        for unit in package.enabled_units:
            state["services"][unit] = {"enabled": True, "active": True}
            if unit == "chrony.service":
                state["time"] = {"synchronised": True, "source": "chrony"}
    return lines


def remove(state: dict, names: list[str]) -> list[str]:
    lines = []
    for name in names:
        if name not in state["packages"]:
            lines.append(f"Package '{name}' is not installed, so not removed")
            continue
        package = packages.find(name)
        del state["packages"][name]
        still_provided = packages.known_units(state)
        shipped = set(package.units if package else ()) | {
            unit for unit, owner in packages.FACTORY_UNIT_PACKAGES.items() if owner == name}
        for unit in shipped - still_provided:
            state["services"].pop(unit, None)
        lines.append(f"Removing {name} ({package.version if package else ''}) ...")
    return lines


def _apt_get(tool, argv: list[str]) -> int:
    simulate = bool({"-s", "--simulate", "--dry-run", "--just-print", "--no-act"} & set(argv))
    args = [arg for arg in argv if not arg.startswith("-")]
    unknown = [arg for arg in argv if arg.startswith("-") and not re.fullmatch(
        r"-[yqs]+|--yes|--assume-yes|--quiet|--no-install-recommends|--simulate|--dry-run|--just-print|--no-act|"
        r"--allow-downgrades|--allow-change-held-packages|-o|--fix-broken|--reinstall", arg)]
    if unknown or not args:
        raise tool.unsupported(argv)
    # "-o Dpkg::Options::=..." takes a value: drop it from the package list.
    values_of_o = {argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "-o"}
    verb, names = args[0], [arg for arg in args[1:] if arg not in values_of_o]
    if verb not in ("install", "remove", "purge", "update"):
        raise tool.unsupported(argv)
    try:
        if verb == "update":
            for line in update(tool):
                tool.print(line)
            tool.print("Reading package lists... Done")
            return 0
        index = repository_index(tool) if verb == "install" else None
        with tool.update() as state:
            lines = (install(state, names, index, download=not simulate) if verb == "install"
                     else remove(state, names))
            if simulate:
                raise _Simulated(lines)
    except _Simulated as simulated:
        for line in simulated.lines:
            tool.print(line.replace("Setting up", "Inst").replace("Removing", "Remv"))
        return 0
    except AptError as exc:
        raise tool.fail(str(exc).removeprefix("E: "), 100) from None
    tool.print("Reading package lists... Done")
    for line in lines:
        tool.print(line)
    return 0


class _Simulated(Exception):
    def __init__(self, lines):
        super().__init__("simulated")
        self.lines = lines


def _dpkg_query(tool, argv: list[str]) -> int:
    fmt = "${Package}\t${Version}\n"
    names, show = [], False
    iterator = iter(argv)
    for arg in iterator:
        if arg in ("-W", "--show"):
            show = True
        elif arg in ("-f", "--showformat"):
            fmt = next(iterator, "")
        elif arg.startswith(("-f=", "--showformat=")):
            fmt = arg.split("=", 1)[1]
        elif arg.startswith("-"):
            raise tool.unsupported(argv)
        else:
            names.append(arg)
    if not show or not names:
        raise tool.unsupported(argv)
    installed = tool.state()["packages"]
    status = 0
    for name in names:
        if name not in installed:
            tool.err.write(f"dpkg-query: no packages found matching {name}\n")
            status = 1
            continue
        values = {"Package": name, "Version": installed[name], "Status": "install ok installed",
                  "db:Status-Abbrev": "ii ", "binary:Package": name}
        text = re.sub(r"\$\{([^}]+)\}", lambda match, values=values: values.get(match.group(1), ""), fmt)
        tool.out.write(text.replace("\\n", "\n").replace("\\t", "\t"))
    return status


def main(tool, argv: list[str]) -> int:
    return _apt_get(tool, argv) if tool.name == "apt-get" else _dpkg_query(tool, argv)
