"""The appliance's own package repository: every package a node installs, for air-gapped sites.

An AI appliance is installed without Internet access. Everything its nodes install comes from one
repository the site definition names (`package_repository: {url: ...}`), by default the one the
management node serves. `manage.py repository build` fills it while online; the stages then point the
nodes at it and nowhere else.

Layout (settings.REPOSITORY_DIR, by default STATE_DIR/repository):

    python/simple/index.html                 PEP 503 simple index
    python/simple/<project>/index.html       links to the wheels, each with its #sha256= fragment
    python/files/<wheel>                     the wheels, downloaded for the nodes' Python versions
    apt/dists/appliance/Release              the suite, with the SHA-256 of each index
    apt/dists/appliance/main/binary-amd64/Packages
    apt/pool/main/<letter>/<name>/<name>_<version>_amd64.deb
    manifest.json                            SHA-256 and size of every file above

Debian packages: a real appliance mirrors the named packages (and what they depend on) from the
upstream repositories given to `--apt-upstream` (NVIDIA's CUDA and DOCA repositories, Ubuntu's
archive); the simulated appliance's upstream is the simulation's package catalogue, for which the
build writes one small real .deb per package (control data only), so that a simulated node downloads
and checks each package as apt does.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from appliance import audit
from appliance.core import resources

# The NVML binding the nodes' Python imports (modules nvml_facts, appliance_acceptance): the version the
# controller is tested with, and the SHA-256 of its wheel as PyPI publishes it. Pinned here, as a lock file
# pins: a rebuild next week gives the nodes the same bytes, and a repository that serves other bytes is
# refused by the build and by pip on the node.
# The telemetry collector (the monitoring stage) adds its sink's client with every package it needs at
# run time, each pinned as the controller's lock (.requirements/runtime.txt) pins it,
# names spelled as `pip freeze` prints them (the node_python role compares its output with these). One
# exception: reactivex 6 needs Python 3.11 and the nodes run 3.10, so they get 5.1.0, the newest release
# for 3.10 that influxdb-client (reactivex>=4.0.4) accepts.
NODE_PYTHON_REQUIREMENTS = {
    "nvidia-ml-py": ("13.615.71", ("959bf4adf6fe1308e4bd739e722236b0d1ec8392e2cefad33ff70c311380b9b6",)),
    "influxdb-client": ("1.50.0", ("f172975cf7f0c95bfe74f288b31273393b164d2c58a948de55497d9956ab49be",)),
    "reactivex": ("5.1.0", ("8668c0a3c8ae8694f1180421b367489d35a8affa281a3605014bf54364eed3a0",)),
    "typing_extensions": ("4.16.0", ("481caa481374e813c1b176ada14e97f1f67a4539ce9cfeb3f350d78d6370c2e8",)),
    "certifi": ("2026.10.19.post1", ("1324c476b4811eff41a8bc2122cd0bbd4d9c7234c725446d99ab1612b3a7fdd2",)),
    "python-dateutil": ("2.9.0.post0", ("a8b2bc7bffae282281c8140a97d3aa9c14da0b136dfe83f850eea9a5f7470427",)),
    "six": ("1.17.0", ("4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274",)),
    "urllib3": ("2.8.0", ("0cf3cae568d36aa9576b28dfb35f11328f1cb974ca7647d9475ebb86c75ac6e3",)),
}
# Ubuntu 22.04, the OS of the appliance's nodes, has Python 3.10. The simulated nodes run the host's
# /usr/bin/python3, whose version `build` adds by default.
NODE_PYTHON_VERSIONS = ("3.10",)
SIMULATED_NODE_PYTHON = "/usr/bin/python3"
SUITE = "appliance"
COMPONENT = "main"
ARCHITECTURE = "amd64"
MANIFEST = "manifest.json"
# A real appliance's management node serves the repository on this port (README "Air-gapped installs").
DEFAULT_PORT = 8090
SOURCE_DATE = 1700000000  # fixed timestamps: the same catalogue builds byte-identical packages

# What the roles install, by role (kept here, beside the names the stage renderers own; a name a
# role installs that is missing here is refused by the simulated apt-get, so the stage tests catch it).
GPU_NODE_PACKAGES = ("nvidia-driver-{branch}-server", "nvidia-utils-{branch}-server",  # nvidia_driver
                     "datacenter-gpu-manager")                                         # dcgm
FABRIC_MANAGER_PACKAGES = ("nvidia-fabricmanager-{branch}",)                           # nvidia_fabricmanager
COMMON_PACKAGES = ("linux-tools-common", "linux-tools-generic",                        # cpu_governor
                   "chrony",                                                           # chrony
                   "opensm",                                                           # fabric (subnet manager)
                   "fio",                                                              # storage_client
                   "python3-pip")                                                      # node_python
STORAGE_CLIENT_PACKAGES = ("lustre-client-modules-dkms", "lustre-client-utils",        # storage_client
                           "beegfs-client", "beegfs-helperd", "beegfs-utils", "nfs-common")


class RepositoryError(Exception):
    pass


@dataclass(frozen=True)
class DebianPackage:
    name: str
    version: str


def root() -> Path:
    return Path(settings.REPOSITORY_DIR)


# --------------------------------------------------------------------------------------------------
# What goes in


def platform_specs() -> list[dict]:
    from appliance.inventory import platforms

    return [platform.spec for platform in platforms.load_all_platforms()]


def required_packages(specs: list[dict] | None = None) -> list[DebianPackage]:
    """Every Debian package (name, version) the roles install on a node of any platform the suite knows."""
    from appliance.partitioning.renderers import stage_vars
    from appliance.simulation import packages as catalogue

    names: dict[str, dict] = {}  # name -> software of a platform it is built for
    for spec in platform_specs() if specs is None else specs:
        software = spec.get("software") or {}
        for name in (*COMMON_PACKAGES, *STORAGE_CLIENT_PACKAGES, *stage_vars.FABRIC_PACKAGES,
                     *stage_vars.SLURM_NODE_PACKAGES, *stage_vars.SLURM_CONTROLLER_PACKAGES):
            names.setdefault(name, software)
        if software.get("driver_version"):
            branch = software["driver_version"].split(".")[0]
            gpu_names = GPU_NODE_PACKAGES + (FABRIC_MANAGER_PACKAGES if software.get("fabric_manager") else ())
            for name in (*gpu_names, *stage_vars.GPUDIRECT_PACKAGES):
                names.setdefault(name.format(branch=branch), software)
    result = set()
    for name, software in names.items():
        package = catalogue.find(name)
        if package is None:
            raise RepositoryError(f"package {name}: not in the simulated package catalogue "
                                  "(appliance/simulation/packages.py)")
        result.add(DebianPackage(name, catalogue.candidate_version(package, software)))
        for dependency in package.depends:
            result.add(DebianPackage(dependency, catalogue.candidate_version(catalogue.find(dependency), software)))
    return sorted(result, key=lambda package: (package.name, package.version))


# --------------------------------------------------------------------------------------------------
# Debian side


def _ar_member(name: str, data: bytes) -> bytes:
    header = f"{name:<16}{SOURCE_DATE:<12}{0:<6}{0:<6}{0o100644:<8o}{len(data):<10}`\n".encode()
    return header + data + (b"\n" if len(data) % 2 else b"")


def _tar_gz(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), SOURCE_DATE, 0o644
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def simulated_deb(package: DebianPackage) -> bytes:
    """A real, installable .deb carrying only its control data: the simulated node records the
    installation in its state; the package's file content would be the real product's."""
    control = (f"Package: {package.name}\nVersion: {package.version}\nArchitecture: {ARCHITECTURE}\n"
               "Maintainer: Appliance simulation <root@localhost>\nSection: misc\nPriority: optional\n"
               f"Description: {package.name} for the simulated appliance\n"
               f" Built from appliance/simulation/packages.py by `{resources.program()} repository build`.\n").encode()
    return (b"!<arch>\n" + _ar_member("debian-binary", b"2.0\n")
            + _ar_member("control.tar.gz", _tar_gz({"./control": control}))
            + _ar_member("data.tar.gz", _tar_gz({})))


def pool_path(name: str, version: str) -> str:
    file_version = version.split(":", 1)[-1]
    return f"pool/{COMPONENT}/{name[0]}/{name}/{name}_{file_version}_{ARCHITECTURE}.deb"


def _stanza(fields: dict[str, str]) -> str:
    return "".join(f"{key}: {value}\n" for key, value in fields.items())


def parse_stanzas(text: str) -> list[dict[str, str]]:
    """Debian control paragraphs (Packages, Release) -> dicts; continuation lines join their field."""
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


def _write_apt_indexes(apt_dir: Path, entries: list[dict[str, str]]) -> None:
    index = f"{COMPONENT}/binary-{ARCHITECTURE}/Packages"
    packages_file = apt_dir / "dists" / SUITE / index
    packages_file.parent.mkdir(parents=True, exist_ok=True)
    data = "\n".join(_stanza(entry) for entry in entries).encode()
    packages_file.write_bytes(data)
    release = _stanza({"Origin": "appliance", "Label": "appliance", "Suite": SUITE, "Codename": SUITE,
                       "Architectures": ARCHITECTURE, "Components": COMPONENT,
                       "Description": "The appliance's own packages (air-gapped installs)"})
    release += f"SHA256:\n {hashlib.sha256(data).hexdigest()} {len(data)} {index}\n"
    (apt_dir / "dists" / SUITE / "Release").write_text(release)


def build_simulated_apt(apt_dir: Path, packages: list[DebianPackage]) -> int:
    from appliance.simulation import packages as catalogue

    entries = []
    for package in packages:
        data = simulated_deb(package)
        relative = pool_path(package.name, package.version)
        (apt_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        (apt_dir / relative).write_bytes(data)
        entry = {"Package": package.name, "Version": package.version, "Architecture": ARCHITECTURE}
        depends = catalogue.find(package.name).depends
        if depends:
            entry["Depends"] = ", ".join(depends)
        entries.append({**entry, "Filename": relative, "Size": str(len(data)),
                        "SHA256": hashlib.sha256(data).hexdigest()})
    _write_apt_indexes(apt_dir, entries)
    return len(entries)


def _fetch(url: str, timeout: float = 60) -> bytes:
    if urllib.parse.urlsplit(url).scheme not in ("http", "https", "file"):
        raise RepositoryError(f"{url}: only http, https and file URLs are fetched")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (scheme checked above)
            return response.read()
    except OSError as exc:
        raise RepositoryError(f"{url}: {getattr(exc, 'reason', exc)}") from None


def _upstream_index(url: str, suite: str, component: str) -> list[dict[str, str]]:
    """The Packages index of one upstream suite/component, checked against its Release file."""
    base = url.rstrip("/")
    release = parse_stanzas(_fetch(f"{base}/dists/{suite}/Release").decode())
    checksums = {}
    for line in (release[0] if release else {}).get("SHA256", "").splitlines():
        parts = line.split()
        if len(parts) == 3:
            checksums[parts[2]] = parts[0]
    for suffix, decompress in (("", bytes), (".xz", lzma.decompress), (".gz", gzip.decompress)):
        name = f"{component}/binary-{ARCHITECTURE}/Packages{suffix}"
        if name not in checksums:
            continue
        data = _fetch(f"{base}/dists/{suite}/{name}")
        if hashlib.sha256(data).hexdigest() != checksums[name]:
            raise RepositoryError(f"{base}/dists/{suite}/{name}: SHA-256 differs from its Release file")
        return parse_stanzas(decompress(data).decode())
    raise RepositoryError(f"{base}/dists/{suite}/Release lists no {component}/binary-{ARCHITECTURE}/Packages index")


def mirror_apt(apt_dir: Path, upstreams: list[tuple[str, str, str]], names: list[str]) -> int:
    """Download the named packages and everything they depend on (first alternative of each) from the
    upstream repositories (url, suite, component), each .deb checked against the upstream index."""
    available: dict[str, tuple[str, dict]] = {}
    for url, suite, component in upstreams:
        for entry in _upstream_index(url, suite, component):
            if entry.get("Architecture") in (ARCHITECTURE, "all") and "Package" in entry:
                available.setdefault(entry["Package"], (url.rstrip("/"), entry))
    wanted, entries, seen = list(names), [], set()
    while wanted:
        name = wanted.pop(0)
        if name in seen:
            continue
        seen.add(name)
        if name not in available:
            raise RepositoryError(f"package {name}: in no upstream repository "
                                  f"({', '.join(f'{u} {s} {c}' for u, s, c in upstreams)})")
        base, entry = available[name]
        data = _fetch(f"{base}/{entry['Filename']}")
        if hashlib.sha256(data).hexdigest() != entry.get("SHA256"):
            raise RepositoryError(f"{base}/{entry['Filename']}: SHA-256 differs from the upstream index")
        relative = pool_path(name, entry["Version"])
        (apt_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        (apt_dir / relative).write_bytes(data)
        entries.append({**entry, "Filename": relative})
        for dependency in re.split(r",\s*", entry.get("Depends", "") + "," + entry.get("Pre-Depends", "")):
            first = dependency.split("|")[0].split("(")[0].split(":")[0].strip()
            if first and first in available:
                wanted.append(first)
    _write_apt_indexes(apt_dir, entries)
    return len(entries)


# --------------------------------------------------------------------------------------------------
# Python side


def download_wheels(files_dir: Path, python_versions: list[str], find_links: Path | None,
                    say: Callable[[str], None] = lambda text: None) -> None:
    files_dir.mkdir(parents=True, exist_ok=True)
    requirements = [f"{name}=={version}" for name, (version, _) in NODE_PYTHON_REQUIREMENTS.items()]
    for version in python_versions:
        say(f"wheels for Python {version}: {', '.join(requirements)} from {find_links or 'PyPI'}")
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
                   "--only-binary=:all:", "--implementation", "cp", "--python-version", version,
                   "--dest", str(files_dir), *requirements]
        if find_links is not None:
            # Offline: only the local wheel cache, never an index.
            command[4:4] = ["--no-index", "--find-links", str(find_links)]
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
        if result.returncode != 0:
            lines = [line for line in (result.stderr or result.stdout).splitlines() if line.startswith("ERROR")]
            raise RepositoryError(f"pip download for Python {version} failed: "
                                  f"{' '.join(lines) or result.stderr.strip()[-500:]}")
    pinned = {digest for _, digests in NODE_PYTHON_REQUIREMENTS.values() for digest in digests}
    for wheel in sorted(files_dir.glob("*.whl")):
        if _sha256(wheel) not in pinned:
            raise RepositoryError(f"{wheel.name}: SHA-256 {_sha256(wheel)} is not the pinned one "
                                  "(repository.NODE_PYTHON_REQUIREMENTS): refused")


def _normalised(project: str) -> str:
    return re.sub(r"[-_.]+", "-", project).lower()


def write_simple_index(python_dir: Path) -> None:
    projects: dict[str, list[Path]] = {}
    for wheel in sorted((python_dir / "files").glob("*.whl")):
        projects.setdefault(_normalised(wheel.name.split("-")[0]), []).append(wheel)
    simple = python_dir / "simple"
    simple.mkdir(parents=True, exist_ok=True)
    links = "".join(f'<a href="{name}/">{name}</a>\n' for name in sorted(projects))
    (simple / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    for name, wheels in projects.items():
        (simple / name).mkdir(exist_ok=True)
        anchors = "".join(f'<a href="../../files/{wheel.name}#sha256={_sha256(wheel)}">{wheel.name}</a>\n'
                          for wheel in wheels)
        (simple / name / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{anchors}</body></html>\n")


# --------------------------------------------------------------------------------------------------
# The whole repository


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _file_hashes(directory: Path) -> dict[str, dict]:
    return {str(path.relative_to(directory)): {"sha256": _sha256(path), "size": path.stat().st_size}
            for path in sorted(directory.rglob("*")) if path.is_file() and path.name != MANIFEST}


@contextlib.contextmanager
def _locked():
    directory = root().parent
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / ".repository.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def simulated_node_python_version() -> str:
    result = subprocess.run([SIMULATED_NODE_PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RepositoryError(f"{SIMULATED_NODE_PYTHON}: cannot run it to learn its version (the simulated "
                              f"nodes' Python): {result.stderr.strip()}")
    return result.stdout.strip()


def build(*, python_versions: list[str] | None = None, find_links: Path | None = None,
          apt_upstreams: list[tuple[str, str, str]] | None = None, apt_packages: list[str] | None = None,
          say: Callable[[str], None] = lambda text: None) -> dict:
    """Fill the repository: wheels of NODE_PYTHON_REQUIREMENTS for each Python version (from PyPI, or
    offline from the `find_links` folder), and the Debian packages (mirrored from `apt_upstreams`, or
    built from the simulation's catalogue). Written aside and swapped in whole: a failed build leaves the
    previous repository as it was. Returns the manifest."""
    versions = sorted(set(python_versions or [*NODE_PYTHON_VERSIONS, simulated_node_python_version()]))
    for version in versions:
        if not re.fullmatch(r"3\.\d{1,2}", version):
            raise RepositoryError(f"--python-version {version!r}: expected 3.N (e.g. 3.10)")
    if find_links is not None and not Path(find_links).is_dir():
        raise RepositoryError(f"--find-links {find_links}: not a folder")
    target = root()
    with _locked():
        work = Path(tempfile.mkdtemp(dir=target.parent, prefix=".repository-build."))
        try:
            download_wheels(work / "python" / "files", versions, Path(find_links) if find_links else None, say)
            write_simple_index(work / "python")
            say("Debian packages from " + (", ".join(" ".join(upstream) for upstream in apt_upstreams)
                                           if apt_upstreams else "the simulated appliance's catalogue"))
            if apt_upstreams:
                count = mirror_apt(work / "apt", apt_upstreams, apt_packages or [p.name for p in required_packages()])
                apt_source = "upstream"
            else:
                count = build_simulated_apt(work / "apt", required_packages())
                apt_source = "simulation"
            manifest = {"python_versions": versions, "requirements": _pins(),
                        "apt": {"suite": SUITE, "component": COMPONENT, "source": apt_source, "packages": count,
                                "upstreams": [list(upstream) for upstream in apt_upstreams or []]},
                        "files": _file_hashes(work)}
            (work / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
            for path in [work, *work.rglob("*")]:
                os.chmod(path, 0o755 if path.is_dir() else 0o644)
            previous = target.with_name(f".{target.name}.previous")
            shutil.rmtree(previous, ignore_errors=True)
            if target.exists():
                os.replace(target, previous)
            os.replace(work, target)
            shutil.rmtree(previous, ignore_errors=True)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    audit.record("repository.build", target_type="repository", target_name=str(target),
                 details={"python_versions": versions, "requirements": _pins(),
                          "apt_source": apt_source, "apt_packages": count, "files": len(manifest["files"]),
                          "offline": find_links is not None})
    return manifest


def ensure_built() -> dict | None:
    """Build the repository from the registries unless one with today's pins is there (the simulated
    appliance's first bootstrap, online; or the first after the pins changed); returns the new manifest,
    or None when one was there."""
    if _current():
        return None
    with _locked():
        # Another process may have built it while this one waited for the lock.
        if _current():
            return None
    return build()


def _current() -> bool:
    try:
        return json.loads((root() / MANIFEST).read_text()).get("requirements") == _pins()
    except (OSError, ValueError, AttributeError):
        return False


def manifest() -> dict:
    path = root() / MANIFEST
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise RepositoryError(f"{root()}: no package repository built here (run `{resources.program()} repository build`)") \
            from None
    except (OSError, json.JSONDecodeError) as exc:
        raise RepositoryError(f"{path}: unreadable ({exc})") from None


def verify() -> list[str]:
    """Problems found: a file of the manifest missing or changed, a file the manifest does not list."""
    expected = manifest()["files"]
    actual = _file_hashes(root())
    problems = [f"{name}: missing" for name in sorted(set(expected) - set(actual))]
    problems += [f"{name}: SHA-256 {actual[name]['sha256']} differs from the manifest's {expected[name]['sha256']}"
                 for name in sorted(set(expected) & set(actual)) if actual[name]["sha256"] != expected[name]["sha256"]]
    problems += [f"{name}: not in the manifest" for name in sorted(set(actual) - set(expected))]
    return problems


def record_verify(problems: list[str]) -> None:
    audit.record("repository.verify", target_type="repository", target_name=str(root()),
                 outcome="success" if not problems else "failure",
                 details={"problems": problems[:50], "count": len(problems)})


def _pins() -> dict[str, str]:
    return {name: version for name, (version, _) in sorted(NODE_PYTHON_REQUIREMENTS.items())}


def python_requirements() -> list[str]:
    """requirements.txt lines for the node venv, with the pinned SHA-256 (pip then requires hashes)."""
    return [f"{name}=={version} " + " ".join(f"--hash=sha256:{digest}" for digest in digests)
            for name, (version, digests) in sorted(NODE_PYTHON_REQUIREMENTS.items())]


# --------------------------------------------------------------------------------------------------
# Where nodes find it


def default_url(appliance) -> str:
    """The management node's repository: on a simulated appliance the server the simulation runs. "" when
    the site names none and has no management node (the package_sources role then fails, saying so)."""
    if appliance.simulated:
        from appliance.simulation import repository_server

        return repository_server.url()
    management = appliance.nodes.filter(role="management").exclude(management_address=None).order_by("name").first()
    if management is None:
        return ""
    host = management.management_address
    return f"http://{'[' + host + ']' if ':' in host else host}:{DEFAULT_PORT}"


def url_of(appliance) -> str:
    configured = ((appliance.settings or {}).get("package_repository") or {}).get("url")
    return (configured or default_url(appliance)).rstrip("/")


def playbook_vars(appliance) -> dict:
    """`package_repository` as the stages read it (roles package_sources and node_python)."""
    url = url_of(appliance)
    if not url:
        return {"url": ""}
    return {"url": url, "apt_url": f"{url}/apt", "apt_suite": SUITE, "apt_component": COMPONENT,
            "python_index_url": f"{url}/python/simple", "python_requirements": python_requirements(),
            # as `pip freeze` prints them: what the node venv must hold
            "python_pins": [f"{name}=={version}" for name, version in _pins().items()]}
