"""The Fabric, Storage and Pools pages of a fleet (45 HGX servers, tests/fleet.py): summaries counted over
every node, one page of nodes at a time, the imported switches and the racks."""

import re

import pytest
from django.db.models import QuerySet

from appliance.core.roles import Role
from appliance.inventory.models import HCAPort, Node
from tests.fleet import bulk_fleet

pytestmark = pytest.mark.django_db

SERVERS = 45  # + 2 storage servers and a management node


@pytest.fixture
def fleet():
    return bulk_fleet(SERVERS)


def text_of(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def card(html: str, testid: str) -> str:
    return html.split(f'data-testid="{testid}"', 1)[1].split(">", 1)[1].split("</section>", 1)[0].split(
        '<div class="card', 1)[0]


def sections(html: str) -> list[str]:
    return re.findall(r'<section class="card node-fabric" data-node="([\w-]+)"', html)


def bring_up(**filters):
    """Ports read Active at 400 Gb/s (not audited: a fixture, as if the fabric stage had run)."""
    QuerySet(HCAPort).filter(**filters).update(state="Active", physical_state="LinkUp", rate_gbps=400)


def test_fabric_counts_every_port_and_shows_one_page_of_nodes(client_for, fleet):
    client = client_for(Role.VIEWER)
    html = client.get("/inventory/fabric/").content.decode()
    # 45 x 8 rails + 2 storage servers x 2 + the management node's 1; none read yet.
    assert text_of(card(html, "ports-at-rate")).startswith("Ports active at expected rate 0 / 365")
    assert text_of(card(html, "problem-nodes")).startswith("Nodes with a port problem 48 / 48")
    assert sections(html) == [f"gpu{i:04d}" for i in range(1, 11)]
    assert "page 1 of 5 (48 in all)" in text_of(html)
    last = client.get("/inventory/fabric/?page=5").content.decode()
    assert sections(last) == ["gpu0041", "gpu0042", "gpu0043", "gpu0044", "gpu0045", "mgmt01", "stor01", "stor02"]

    bring_up()
    bring_up(hca__node__name="gpu0007", hca__device="mlx5_3")
    QuerySet(HCAPort).filter(hca__node__name="gpu0007", hca__device="mlx5_3").update(
        counters={"SymbolErrorCounter": 57})
    QuerySet(HCAPort).filter(hca__node__name="gpu0031", hca__device="mlx5_6").update(state="Down")
    html = client.get("/inventory/fabric/").content.decode()
    assert text_of(card(html, "ports-at-rate")).startswith("Ports active at expected rate 364 / 365")
    assert text_of(card(html, "ports-with-errors")).startswith("Ports with error counters over threshold 1")
    assert text_of(card(html, "problem-nodes")).startswith("Nodes with a port problem 2 / 48")
    problems = client.get("/inventory/fabric/?state=problem").content.decode()
    assert sections(problems) == ["gpu0007", "gpu0031"] and problems.count('data-port="') == 2
    assert sections(client.get("/inventory/fabric/?state=Down").content.decode()) == ["gpu0031"]
    assert sections(client.get("/inventory/fabric/?node=gpu0031").content.decode()) == ["gpu0031"]


def test_fabric_shows_the_imported_switches_and_the_racks(client_for, fleet):
    html = client_for(Role.VIEWER).get("/inventory/fabric/").content.decode()
    switches = card(html, "switches")
    # Two scalable units of 32 servers, a leaf per rail each: 16 leaves, 4 spines, 64 ports each.
    assert "20 switches, 1280 ports, as the site declares them" in text_of(switches)
    groups = re.findall(r'<tr data-switch-group="([\w/]+)"><td>(\w+)</td><td>(\w+)</td><td>([^<]+)</td>'
                        r'<td>(\d+)</td><td>(\d+)</td>', switches)
    assert groups == [("infiniband/leaf", "InfiniBand", "leaf", "NVIDIA QM9700", "16", "1024"),
                      ("infiniband/spine", "InfiniBand", "spine", "NVIDIA QM9700", "4", "256")]
    listed = re.findall(r'<tr data-switch="([\w-]+)">', switches)
    assert listed[:3] == ["ib-su001-rail0", "ib-su001-rail1", "ib-su001-rail2"] and len(listed) == 20
    assert "<code>10.9.0.5</code>" in switches  # ib-su001-rail0's management address
    racks = re.findall(r'<tr data-rack="(\w*)"><td>[^<]+</td><td>(\d+)</td>', card(html, "topology"))
    # Four servers a rack: r001-r011 full, r012 holds gpu0045; the storage and management nodes in s01.
    assert racks[:2] == [("r001", "4"), ("r002", "4")] and racks[-2:] == [("r012", "1"), ("s01", "3")]
    assert len(racks) == 13
    assert '<span class="badge">rack r001</span><span class="badge">slot 1</span>' in html


def test_storage_counts_clients_per_filesystem_and_pages_them(client_for, fleet):
    mounted = {"mounts": [{"mount_point": "/mnt/scratch", "present": True, "fstype": "lustre",
                           "source": "10.2.236.57@o2ib:/scratch", "options": ["rw", "flock", "noatime"]}],
               "storage": {"results": [{"mount_point": "/mnt/scratch", "read_mbps": 11876, "write_mbps": 9032}]}}
    QuerySet(Node).filter(name__in=["gpu0001", "gpu0002", "gpu0003"]).update(facts=mounted)
    absent = {"mounts": [{"mount_point": "/mnt/scratch", "present": False}]}
    QuerySet(Node).filter(name="gpu0004").update(facts=absent)
    client = client_for(Role.VIEWER)
    html = client.get("/inventory/storage/").content.decode()
    clients = text_of(html.split('data-testid="clients">', 1)[1].split("</td>", 1)[0])
    assert clients == "3 mounted · 1 not mounted · 41 not verified"
    assert "page 1 of 5 (45 in all)" in text_of(html)  # the GPU servers: the default client role
    problems = client.get("/inventory/storage/?show=problem").content.decode()
    assert re.findall(r'<section class="card" data-node="([\w-]+)"', problems) == ["gpu0004"]


def test_pools_of_a_fleet_are_counted_paged_and_link_their_files(client_for, fleet):
    client = client_for(Role.VIEWER)
    html = client.get("/inventory/pools/").content.decode()
    training = html.split('data-pool="training"', 1)[1].split('data-pool="inference"', 1)[0]
    inference = html.split('data-pool="inference"', 1)[1]
    # Three quarters of 45 servers train (33), 12 serve; 8 GPUs each from the platform.
    assert '<strong data-testid="gpu-total">264</strong> GPUs on 33 nodes' in training
    assert '<strong data-testid="gpu-total">96</strong> GPUs on 12 nodes' in inference
    assert text_of(training.split('data-testid="racks">', 1)[1].split("</dd>", 1)[0]) == "9 racks (node label rack)"
    assert len(re.findall(r'<tr data-node="', training)) == 25 and "page 1 of 2 (33 in all)" in text_of(training)
    # A fleet's files are links, rendered when opened.
    assert "<pre>" not in html and "PartitionName" not in html
    assert 'href="/inventory/pools/fleet/files/slurm.conf?view=1"' in html
    opened = client.get("/inventory/pools/fleet/files/slurm.conf?view=1")
    assert opened.status_code == 200 and "Content-Disposition" not in opened
    names = ",".join(f"gpu{i:04d}" for i in range(1, 34))
    assert f"PartitionName=train Nodes={names} " in opened.content.decode()
