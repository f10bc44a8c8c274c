"""Pages and list endpoints at fleet scale: the same number of queries, and no statement that grows,
whether the appliance has 60 GPU servers or 120 (an N+1 adds queries; an unbounded IN list or OR chain
adds to one statement, and at 1,000 nodes SQLite refuses it: "Expression tree is too large").

Both fleets are written with bulk_create (tests/fleet.py), each an appliance of its own in one inventory.
"""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from appliance.core.roles import Role
from tests.fleet import bulk_fleet, node_name

SMALL, LARGE = 60, 120  # both above every page size (50 an API page, 20 nodes a fabric page)

PAGES = [
    "/inventory/fabric/?appliance={appliance}",
    "/inventory/fabric/?appliance={appliance}&state=problem",
    "/inventory/fabric/?appliance={appliance}&page=2",
    "/inventory/storage/?appliance={appliance}",
    "/inventory/pools/?appliance={appliance}",
    "/inventory/pools/{appliance}/files/slurm.conf",  # rendered from the whole site's snapshot
    "/inventory/nodes/?appliance={appliance}",
    "/",
]
ENDPOINTS = [
    "/api/v1/inventory/appliances/",
    "/api/v1/inventory/nodes/?appliance={appliance}",
    "/api/v1/inventory/nodes/{node_id}/",
    "/api/v1/inventory/gpus/",
    "/api/v1/inventory/hcas/",
    "/api/v1/inventory/hca-ports/",
    "/api/v1/inventory/switches/?appliance={appliance}",
    "/api/v1/inventory/networks/",
    "/api/v1/inventory/filesystems/",
    "/api/v1/inventory/pools/?appliance={appliance}",
    "/api/v1/inventory/platforms/",
]


def shape(sql: str) -> str:
    """A statement with its numbers blanked: ids and counts differ between fleets, its length may not."""
    return re.sub(r"\d+", "0", sql)


def measure(client, urls: list[str], appliance: str, site: int) -> dict[str, list[str]]:
    from appliance.inventory.models import Node

    node_id = Node.objects.get(name=node_name(0, site)).pk
    result = {}
    for template in urls:
        url = template.format(appliance=appliance, node_id=node_id)
        with CaptureQueriesContext(connection) as captured:
            response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        result[template] = [shape(q["sql"]) for q in captured.captured_queries]
    return result


@pytest.mark.django_db
@pytest.mark.parametrize("urls", [PAGES, ENDPOINTS], ids=["pages", "api"])
def test_queries_do_not_grow_with_the_fleet(client_for, urls):
    client = client_for(Role.ADMINISTRATOR)
    bulk_fleet(SMALL, "fleet-small", site=1)
    client.get("/")  # session and user loaded once, outside the counts
    small = measure(client, urls, "fleet-small", site=1)
    bulk_fleet(LARGE, "fleet-large", site=2)
    large = measure(client, urls, "fleet-large", site=2)
    for url in urls:
        assert len(large[url]) == len(small[url]), (url, "query count", len(small[url]), len(large[url]))
        # The session row holds signed, random text: its length says nothing about the fleet.
        grown = [(a, b) for a, b in zip(small[url], large[url], strict=True)
                 if len(b) > len(a) and "django_session" not in b]
        assert not grown, (url, "a statement grows with the fleet", grown[0][1][:300])


@pytest.mark.django_db
def test_a_thousand_rows_in_one_page_make_no_or_chain(client_for):
    """A forward relation prefetched over a page of 1,000 rows is one OR term per row on SQLite (Django
    5.2), which SQLite refuses past 1,000 terms: 130 servers have 1,040 HCA ports."""
    client = client_for(Role.ADMINISTRATOR)
    bulk_fleet(130, "fleet-wide", site=3)
    for url in ("/api/v1/inventory/nodes/?appliance=fleet-wide&page_size=1000",
                "/api/v1/inventory/hcas/?page_size=1000", "/api/v1/inventory/hca-ports/?page_size=1000",
                "/api/v1/inventory/gpus/?page_size=1000", "/api/v1/inventory/pools/", "/inventory/fabric/?appliance=fleet-wide",
                "/inventory/pools/?appliance=fleet-wide", "/inventory/storage/?appliance=fleet-wide"):
        with CaptureQueriesContext(connection) as captured:
            response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        longest = max(q["sql"].count(" OR ") for q in captured.captured_queries)
        assert longest < 100, (url, f"a statement with {longest} OR terms")
