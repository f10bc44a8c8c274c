"""The package repository of air-gapped installs: built offline from a local wheel folder, checked
file by file against its manifest, and served to the nodes by the simulated management node."""

import hashlib
import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction

from appliance.audit.models import AuditRecord
from appliance.provisioning import repository

WHEEL = "nvidia_ml_py-13.615.71-py3-none-any.whl"
WHEEL_SHA256 = "959bf4adf6fe1308e4bd739e722236b0d1ec8392e2cefad33ff70c311380b9b6"
# The node venv's pins: the NVML binding, and the collector's InfluxDB client with what it needs at run
# time (as `pip freeze` spells them).
PINS = {"nvidia-ml-py": "13.615.71", "influxdb-client": "1.50.0", "reactivex": "5.1.0",
        "typing_extensions": "4.16.0", "certifi": "2026.10.19.post1", "python-dateutil": "2.9.0.post0",
        "six": "1.17.0", "urllib3": "2.8.0"}


@pytest.fixture(scope="session")
def wheel_cache(tmp_path_factory, django_db_setup, django_db_blocker):
    """A local folder holding the pinned wheels: taken from the suite's own repository, which its first
    user built once from PyPI (pip's cache makes that cheap)."""
    with django_db_blocker.unblock(), transaction.atomic():
        repository.ensure_built()
        transaction.set_rollback(True)  # its audit record is no test's
    folder = tmp_path_factory.mktemp("wheels")
    for wheel in (repository.root() / "python" / "files").glob("*.whl"):
        shutil.copy(wheel, folder)
    return folder


@pytest.fixture
def offline(monkeypatch):
    # Any connection pip tried would go through a proxy that is not there, and fail.
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")


@pytest.fixture
def fresh_repository(settings, tmp_path):
    settings.REPOSITORY_DIR = tmp_path / "repository"
    return settings.REPOSITORY_DIR


def test_a_build_from_a_local_wheel_folder_needs_no_network(db, wheel_cache, offline, fresh_repository, capsys):
    call_command("repository", "build", "--find-links", str(wheel_cache), "--python-version", "3.10")

    root = fresh_repository
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["python_versions"] == ["3.10"]
    assert manifest["requirements"] == PINS
    influxdb_client = "python/files/influxdb_client-1.50.0-py3-none-any.whl"
    assert manifest["files"][influxdb_client]["sha256"] == (
        "f172975cf7f0c95bfe74f288b31273393b164d2c58a948de55497d9956ab49be")
    assert manifest["files"][f"python/files/{WHEEL}"]["sha256"] == WHEEL_SHA256
    assert (f'<a href="../../files/{WHEEL}#sha256={WHEEL_SHA256}">'
            in (root / "python/simple/nvidia-ml-py/index.html").read_text())
    packages = (root / "apt/dists/appliance/main/binary-amd64/Packages").read_text()
    assert ("Package: nvidia-driver-550-server\nVersion: 550.90.07\nArchitecture: amd64\n"
            "Filename: pool/main/n/nvidia-driver-550-server/nvidia-driver-550-server_550.90.07_amd64.deb\n") in packages
    assert "Package: chrony\nVersion: 4.2-2ubuntu2\n" in packages
    assert "Package: python3-pip\nVersion: 22.0.2+dfsg-1ubuntu0.4\nArchitecture: amd64\nDepends: python3-setuptools\n" in packages
    assert "Package: nvidia-container-toolkit\n" not in packages  # in the catalogue, installed by no role
    release = (root / "apt/dists/appliance/Release").read_text()
    digest = hashlib.sha256(packages.encode()).hexdigest()
    assert f"SHA256:\n {digest} {len(packages.encode())} main/binary-amd64/Packages\n" in release
    assert "Debian packages (simulation)" in capsys.readouterr().out
    record = AuditRecord.objects.filter(event="repository.build").latest("sequence")
    assert record.details["offline"] is True and record.details["requirements"] == PINS

    call_command("repository", "verify")
    deb = root / "apt/pool/main/c/chrony/chrony_4.2-2ubuntu2_amd64.deb"
    deb.write_bytes(deb.read_bytes() + b"tampered")
    (root / "apt/pool/main/c/chrony/extra.deb").write_bytes(b"x")
    with pytest.raises(CommandError) as failed:
        call_command("repository", "verify")

    assert "apt/pool/main/c/chrony/chrony_4.2-2ubuntu2_amd64.deb: SHA-256 " in str(failed.value)
    assert "apt/pool/main/c/chrony/extra.deb: not in the manifest" in str(failed.value)
    assert AuditRecord.objects.filter(event="repository.verify").latest("sequence").outcome == "failure"


def test_a_wheel_folder_without_the_pinned_version_fails_the_build_and_keeps_the_old_one(
        db, wheel_cache, offline, fresh_repository, tmp_path):
    call_command("repository", "build", "--find-links", str(wheel_cache), "--python-version", "3.10")
    before = (fresh_repository / "manifest.json").read_text()
    empty = tmp_path / "empty"
    empty.mkdir()

    with pytest.raises(CommandError, match=r"pip download for Python 3\.10 failed: .*nvidia-ml-py==13\.615\.71"):
        call_command("repository", "build", "--find-links", str(empty), "--python-version", "3.10")
    with pytest.raises(CommandError, match=r"--python-version '3': expected 3\.N"):
        call_command("repository", "build", "--find-links", str(empty), "--python-version", "3")

    assert (fresh_repository / "manifest.json").read_text() == before


def test_a_wheel_that_is_not_the_pinned_one_is_refused(db, wheel_cache, offline, fresh_repository, monkeypatch):
    monkeypatch.setitem(repository.NODE_PYTHON_REQUIREMENTS, "nvidia-ml-py", ("13.615.71", ("0" * 64,)))

    with pytest.raises(repository.RepositoryError, match=f"{WHEEL}: SHA-256 {WHEEL_SHA256} is not the pinned one"):
        repository.build(python_versions=["3.10"], find_links=wheel_cache)

    assert not fresh_repository.exists()


def test_the_simulated_management_node_serves_the_repository(db, wheel_cache, settings, tmp_path):
    from appliance.simulation import repository_server

    settings.SIMULATION_DIR = tmp_path / "simulation"
    settings.REPOSITORY_DIR = repository.root()  # the suite's, built once
    pid = repository_server.start()
    try:
        status = repository_server.status()
        with urllib.request.urlopen(f"{status['url']}/python/files/{WHEEL}", timeout=5) as response:
            served = response.read()
        assert status["running"] and status["answering"] and status["pid"] == pid
        assert status["url"].startswith("http://127.0.0.1:")
        assert hashlib.sha256(served).hexdigest() == WHEEL_SHA256
        assert repository_server.start() == pid  # already running: the same server
    finally:
        assert repository_server.stop() == pid
    assert repository_server.status()["running"] is False
    events = list(AuditRecord.objects.filter(event__startswith="simulation.repository.").values_list("event", flat=True))
    assert events == ["simulation.repository.start", "simulation.repository.stop"]


def test_a_site_without_a_repository_url_uses_its_management_node(db, settings):
    from appliance.inventory.models import Appliance, Node

    appliance = Appliance.objects.create(name="rack1", simulated=False)
    Node.objects.create(appliance=appliance, name="mgmt01", role="management", management_address="10.1.0.5")

    assert repository.playbook_vars(appliance)["apt_url"] == "http://10.1.0.5:8090/apt"
    appliance.settings = {"package_repository": {"url": "https://mirror.example.org/appliance/"}}
    assert repository.playbook_vars(appliance)["python_index_url"] == "https://mirror.example.org/appliance/python/simple"
    assert repository.playbook_vars(Appliance.objects.create(name="bare", simulated=False)) == {"url": ""}


@pytest.fixture
def demo_site_text(db, settings, tmp_path):
    """The demo site as this state directory imports it, its BMC credential in the store."""
    from appliance.simulation import services

    settings.SIMULATION_DIR = tmp_path / "simulation"
    services.ensure_demo_credential()
    return services.demo_site_text()


def _parsed_repository(site_text: str) -> dict | list[str]:
    from appliance.inventory.sitedef import SiteValidationError, parse_site

    try:
        return parse_site(site_text, "site.yml").package_repository
    except SiteValidationError as exc:
        return [str(error) for error in exc.errors]


@pytest.mark.parametrize(("section", "expected"), [
    ('{url: "https://mirror.example.org/appliance/"}', {"url": "https://mirror.example.org/appliance"}),
    ('{url: "http://192.168.100.5:8090"}', {"url": "http://192.168.100.5:8090"}),
    ('{url: "http://127.0.0.1:8090"}', {"url": "http://127.0.0.1:8090"}),  # loopback: a simulated site
    ('{url: "http://10.20.0.5:8090"}', ["site.yml:{line}: package_repository.url: 'http://10.20.0.5:8090': an http "
                                         "repository must be an address of a management network (192.168.100.0/24); "
                                         "use https for any other host"]),
    ('{url: "ftp://mirror"}', ["site.yml:{line}: package_repository.url: 'ftp://mirror' is not a URL "
                               "(expected https://host[:port])"]),
    ('{path: /srv}', ["site.yml:{line}: package_repository.path: unknown key (allowed here: url)",
                      "site.yml:{line}: package_repository.url: required field missing"]),
])
def test_the_site_names_its_repository(demo_site_text, section, expected):
    line = len(demo_site_text.splitlines()) + 1
    parsed = _parsed_repository(demo_site_text + f"package_repository: {section}\n")

    if isinstance(expected, list):
        expected = [message.format(line=line) for message in expected]
    assert parsed == expected


def test_a_build_mirrors_named_packages_and_their_dependencies_from_an_upstream(db, wheel_cache, offline, settings,
                                                                               tmp_path, monkeypatch):
    from appliance.simulation import repository_server

    # The upstream: the suite's repository, served over HTTP as NVIDIA's or Ubuntu's would be.
    settings.SIMULATION_DIR = tmp_path / "simulation"
    served = settings.REPOSITORY_DIR = repository.root()
    repository_server.start()
    upstream = repository_server.url()
    monkeypatch.setenv("no_proxy", "127.0.0.1")  # the loopback upstream is reached directly, nothing else
    settings.REPOSITORY_DIR = tmp_path / "mirror"
    try:
        call_command("repository", "build", "--find-links", str(wheel_cache), "--python-version", "3.10",
                     "--apt-upstream", f"{upstream}/apt appliance main", "--apt-package", "nvidia-gds")
        with pytest.raises(CommandError, match=r"package cuda-toolkit: in no upstream repository \(http://127\.0\.0\.1:"):
            call_command("repository", "build", "--find-links", str(wheel_cache), "--python-version", "3.10",
                         "--apt-upstream", f"{upstream}/apt appliance main", "--apt-package", "cuda-toolkit")
    finally:
        settings.REPOSITORY_DIR = served
        repository_server.stop()

    mirrored = (tmp_path / "mirror/apt/dists/appliance/main/binary-amd64/Packages").read_text()
    assert [line for line in mirrored.splitlines() if line.startswith("Package: ")] == [
        "Package: nvidia-gds", "Package: nvidia-fs"]
    assert "Depends: nvidia-fs\n" in mirrored
    manifest = json.loads((tmp_path / "mirror/manifest.json").read_text())
    assert manifest["apt"] == {"component": "main", "packages": 2, "source": "upstream", "suite": "appliance",
                               "upstreams": [[f"{upstream}/apt", "appliance", "main"]]}


def test_a_simulated_node_installs_only_what_the_served_index_lists(db, wheel_cache, settings, tmp_path):
    from appliance.inventory.models import Appliance, Node, Platform
    from appliance.inventory.platforms import load_platform
    from appliance.simulation import repository_server, services

    settings.SIMULATION_DIR = tmp_path / "simulation"
    settings.REPOSITORY_DIR = repository.root()
    spec = load_platform("hgx-h100-8gpu")
    appliance = Appliance.objects.create(name="airgap", simulated=True)
    node = Node.objects.create(appliance=appliance, name="gpu01", role="gpu", management_address="10.9.0.1",
                               platform=Platform.objects.create(slug=spec.slug, **spec.row_values()),
                               sysroot=str(settings.SIMULATION_DIR / "nodes" / "gpu01"))
    services.prepare_appliance(appliance)
    repository_server.start()
    environment = {**os.environ, **services.node_environment(node)}

    def apt_get(*arguments):
        return subprocess.run(["apt-get", *arguments], capture_output=True, text=True, env=environment, check=False)

    try:
        sources = Path(node.sysroot) / "etc/apt/sources.list.d"
        sources.mkdir(parents=True)
        (sources / "appliance.list").write_text(f"deb [trusted=yes] {repository_server.url()}/apt appliance main\n")
        updated = apt_get("update")
        refused = apt_get("install", "-y", "nvidia-container-toolkit")
        installed = apt_get("install", "-y", "nvidia-gds")
        log = (settings.SIMULATION_DIR / "repository-server.log").read_text()
    finally:
        repository_server.stop()

    assert updated.returncode == 0, updated.stderr
    assert refused.returncode == 100
    assert "apt-get: Unable to locate package nvidia-container-toolkit" in refused.stderr
    assert installed.returncode == 0, installed.stderr
    state = services.node_state_of(node)["packages"]
    assert (state["nvidia-gds"], state["nvidia-fs"]) == ("12.4.0-1", "2.20.5-1")
    assert "nvidia-container-toolkit" not in state
    assert "GET /apt/dists/appliance/Release HTTP" in log
    assert "GET /apt/pool/main/n/nvidia-fs/nvidia-fs_2.20.5-1_amd64.deb HTTP" in log
    assert "GET /apt/pool/main/n/nvidia-gds/nvidia-gds_12.4.0-1_amd64.deb HTTP" in log
