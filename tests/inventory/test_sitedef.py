"""Validation of site definitions: every error at once, each with file:line and field path."""

import pytest

from appliance.audit.models import AuditRecord
from appliance.inventory.models import Appliance, Node
from appliance.inventory.platforms import available_platforms, load_platform
from appliance.inventory.services import validate_site
from appliance.inventory.sitedef import SiteError, SiteValidationError

BROKEN = """\
appliance: {name: lab}
simulation: yes
defaults:
  bmc: {credential: lab-bmc}
networks:
  - {name: mgmt, kind: management, cidr: 192.168.0.0/24}
  - {name: ib0, kind: ipoib, cidr: 10.10.0.1/16, pkey: "0x7fff"}
nodes:
  - name: gpu01
    role: gpu
    platform: hgx-h100-8gpu
    gpus: 4
    management_address: 192.168.0.11
    bmc: {url: "https://10.0.0.1"}
  - name: gpu01
    role: gpu
    platform: hgx-h100-8gpu
    management_address: 192.168.0.11
    bmc: {url: "https://10.0.0.1"}
  - name: gpu03
    role: compute
    platform: dgx-b300
    management_address: 192.168.0.300
    colour: red
    bmc:
      url: not-a-url
      password: hunter2
  - name: gpu04
    role: gpu
    platform: hgx-h100-8gpu
    management_address: 10.99.0.4
    bmc: {url: "https://10.0.0.4", password: {env: SITE_TEST_UNSET_VARIABLE}}
pools:
  - {name: training, kind: training, nodes: [gpu01, gpu04]}
  - {name: inference, kind: inference, nodes: [gpu04, gpu09]}
"""


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    seen = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            seen += 1
            if seen == occurrence:
                return number
    raise AssertionError(f"{needle!r} not in the text")


def errors_of(text: str, filename: str = "site.yml") -> list[SiteError]:
    with pytest.raises(SiteValidationError) as caught:
        validate_site(text, filename)
    return caught.value.errors


def test_demo_site_is_valid(demo_text, site_env):
    site = validate_site(demo_text, "demo.yml")
    assert site.name == "demo" and site.simulation is True
    assert [n.name for n in site.nodes] == ["gpu01", "gpu02", "gpu03", "gpu04", "stor01", "stor02", "mgmt01"]
    assert [n.bmc.url for n in site.nodes] == [f"https://127.0.0.1:{port}" for port in range(18441, 18448)]
    assert {(n.bmc.credential, n.bmc.verify_tls) for n in site.nodes} == {("demo-bmc", True)}
    assert site.fabric == {"subnet_manager": {"kind": "opensm", "node": "mgmt01", "priority": 15}}
    ib0 = next(n for n in site.networks if n.name == "ib0")
    assert (ib0.cidr, ib0.pkey, ib0.mtu) == ("10.10.0.0/16", "0x7fff", 4092)
    fs = {f.name: f for f in site.filesystems}
    assert fs["scratch"].servers == ["stor01", "stor02"] and fs["scratch"].options == ["flock", "noatime"]
    assert fs["datasets"].options == ["proto=rdma", "port=20049", "nconnect=8", "vers=4.2"]
    pools = {p.name: p for p in site.pools}
    assert pools["training"].nodes == ["gpu01", "gpu02", "gpu03"] and pools["training"].settings == {"partition": "train"}
    assert pools["inference"].nodes == ["gpu04"] and pools["inference"].settings == {"time_slicing": {"replicas": 4}}


def test_every_error_is_reported_at_once_with_line_and_path(site_env):
    errors = errors_of(BROKEN)
    found = {(e.line, e.path): e.message for e in errors}
    expected = {
        (line_of(BROKEN, "simulation: yes"), "simulation"): "expected true or false",
        (line_of(BROKEN, "10.10.0.1/16"), "networks[1].cidr"): "has host bits set",
        (line_of(BROKEN, "gpus: 4"), "nodes[0].gpus"): "contradicts platform hgx-h100-8gpu, which has 8",
        (line_of(BROKEN, "name: gpu01", 2), "nodes[1].name"): "duplicate node name 'gpu01'",
        (line_of(BROKEN, "management_address: 192.168.0.11", 2), "nodes[1].management_address"):
            "duplicate management address 192.168.0.11",
        (line_of(BROKEN, 'bmc: {url: "https://10.0.0.1"}', 2), "nodes[1].bmc.url"): "duplicate BMC URL",
        (line_of(BROKEN, "role: compute"), "nodes[2].role"): "'compute' is not one of",
        (line_of(BROKEN, "platform: dgx-b300"), "nodes[2].platform"): "unknown platform 'dgx-b300'",
        (line_of(BROKEN, "192.168.0.300"), "nodes[2].management_address"): "is not an IP address",
        (line_of(BROKEN, "colour: red"), "nodes[2].colour"): "unknown key",
        (line_of(BROKEN, "url: not-a-url"), "nodes[2].bmc.url"): "not a URL",
        (line_of(BROKEN, "password: hunter2"), "nodes[2].bmc.password"): "a site definition holds no password",
        (line_of(BROKEN, "10.99.0.4"), "nodes[3].management_address"): "outside the management network",
        (line_of(BROKEN, "SITE_TEST_UNSET_VARIABLE"), "nodes[3].bmc.password"): "a site definition holds no password",
        (line_of(BROKEN, "name: inference"), "pools[1].nodes[0]"): "already in pool training",
        (line_of(BROKEN, "name: inference"), "pools[1].nodes[1]"): "unknown node 'gpu09'",
    }
    for where, message in expected.items():
        assert where in found, f"no error at {where}; got:\n" + "\n".join(map(str, errors))
        assert message in found[where], f"{where}: {found[where]!r}"
    # gpu03 exists (with errors) and gpu01 is declared twice: neither makes a pool error of its own.
    assert not any("unknown node 'gpu01'" in e.message for e in errors)
    assert len(errors) == len(expected), "\n".join(map(str, errors))


def test_error_text_is_file_line_path_message(site_env):
    text = BROKEN.replace("url: not-a-url", "url: not-a-url")
    message = str(next(e for e in errors_of(text, "site.yml") if e.path == "nodes[2].bmc.url"))
    assert message == f"site.yml:{line_of(text, 'url: not-a-url')}: nodes[2].bmc.url: 'not-a-url' is not a URL (expected https://host[:port])"
    whole = str(SiteValidationError(errors_of(text)))
    assert len(whole.splitlines()) == len(errors_of(text))


def test_yaml_syntax_error_names_its_line(site_env):
    errors = errors_of("appliance: {name: lab}\nnodes:\n  - name: [gpu01\n    role: gpu\n")
    assert len(errors) == 1 and errors[0].line >= 3 and "YAML syntax error" in errors[0].message


def test_duplicate_yaml_keys_are_an_error(site_env):
    errors = errors_of("appliance: {name: lab}\nnodes: []\nnodes: []\n")
    assert errors[0].line == 3 and "duplicate key" in errors[0].message


def test_unknown_credential_is_named_once(site_env):
    text = (site_env.DEMO_SITE).read_text().replace("credential: demo-bmc", "credential: nobody-made-it")
    errors = errors_of(text, "demo.yml")
    assert [(e.path, e.message) for e in errors] == [
        ("defaults.bmc.credential", "unknown credential 'nobody-made-it' (an Administrator creates it: "
                                    "manage.py credential create)")]


def test_retired_bmc_keys_and_required_credential(site_env):
    text = """\
appliance: {name: lab}
nodes:
  - name: n1
    role: login
    platform: management-server
    management_address: 10.0.0.1
    bmc: {url: "https://10.0.0.2", username: root, ca_file: /nonexistent/ca.pem}
"""
    errors = {(e.path, e.line): e.message for e in errors_of(text)}
    assert errors == {
        ("nodes[0].bmc.credential", 7): "required field missing (give it here or in defaults.bmc)",
        ("nodes[0].bmc.username", 7): "the BMC user name belongs to the credential (manage.py credential create "
                                      "NAME --username USER); name the credential here (credential: NAME)",
        ("nodes[0].bmc.ca_file", 7): "the CA that verifies a BMC's certificate belongs to its credential "
                                     "(manage.py credential create NAME --ca-file FILE); remove it here",
    }


def test_a_node_names_its_credential_and_may_turn_tls_off_on_a_simulated_site(site_env):
    text = """\
appliance: {name: lab}
simulation: true
nodes:
  - name: n1
    role: storage
    platform: storage-server
    management_address: 10.0.0.1
    bmc: {url: "https://bmc-n1", credential: lab-bmc, verify_tls: false}
"""
    site = validate_site(text, "lab.yml")
    assert (site.nodes[0].bmc.credential, site.nodes[0].bmc.verify_tls) == ("lab-bmc", False)


def test_pool_and_fabric_cross_checks(site_env, demo_text):
    text = (demo_text.replace("node: mgmt01, priority: 15", "node: mgmt09, priority: 16")
            .replace("nodes: [gpu04]", "nodes: [gpu04, stor01]")
            .replace("settings: {partition: train}", "settings: {partition: train, time_slicing: {replicas: 2}}")
            .replace("servers: [stor02]", "servers: [stor03]"))
    messages = {e.path: e.message for e in errors_of(text, "demo.yml")}
    assert messages["fabric.subnet_manager.node"] == "unknown node 'mgmt09'"
    assert messages["fabric.subnet_manager.priority"].startswith("16 is out of range")
    assert messages["pools[1].nodes[1]"] == "node stor01 is a storage node; pools hold GPU nodes"
    assert "time-slicing is for inference pools" in messages["pools[0].settings.time_slicing"]
    assert messages["filesystems[1].servers[0]"] == "unknown node 'stor03'"
    assert len(messages) == 5


def test_validate_writes_nothing(site_env, demo_text, db):
    before = AuditRecord.objects.count()
    validate_site(demo_text, "demo.yml")
    with pytest.raises(SiteValidationError):
        validate_site(BROKEN, "site.yml")
    assert AuditRecord.objects.count() == before
    assert not Appliance.objects.exists() and not Node.objects.exists()


def test_shipped_platforms_load():
    specs = {slug: load_platform(slug) for slug in available_platforms()}
    hgx = specs["hgx-h100-8gpu"]
    assert (hgx.gpu_count, hgx.gpu_model, hgx.gpu_memory_mib, hgx.mig_capable) == (8, "NVIDIA H100 80GB HBM3", 81559, True)
    assert hgx.hca_devices == [f"mlx5_{i}" for i in range(8)] and hgx.hca_rate_gbps == 400
    assert hgx.nvlink_peers(3) == [0, 1, 2, 4, 5, 6, 7]
    assert [p.closest_gpu for p in hgx.ports] == list(range(8))
    assert specs["storage-server"].gpu_count == 0 and len(specs["storage-server"].ports) == 2


def test_broken_platform_file_reports_its_own_lines(settings, tmp_path, site_env):
    platforms = tmp_path / "firmware" / "platforms"
    platforms.mkdir(parents=True)
    (platforms / "odd-box.yaml").write_text(
        "id: other-box\nname: Odd box\ngpu:\n  count: two\nhcas:\n  ports:\n    - {device: mlx5_0, closest_gpu: 3}\n")
    settings.FIRMWARE_DIR = tmp_path / "firmware"
    text = """\
appliance: {name: lab}
defaults: {bmc: {credential: lab-bmc}}
nodes:
  - {name: n1, role: login, platform: odd-box, management_address: 10.0.0.1, bmc: {url: "https://10.0.0.2"}}
"""
    errors = [str(e) for e in errors_of(text, "lab.yml")]
    assert "lab.yml:4: nodes[0].platform: platform 'odd-box' is invalid (errors listed for its file)" in errors
    platform_file = str(platforms / "odd-box.yaml")
    assert f"{platform_file}:1: id: is 'other-box' but the file is odd-box.yaml: the id must be the file name" in errors
    assert f"{platform_file}:4: gpu.count: expected a whole number, got text" in errors
    assert f"{platform_file}:7: hcas.ports[0].closest_gpu: GPU 3 does not exist (the platform has 0 GPUs)" in errors
