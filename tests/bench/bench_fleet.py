"""Fleet-scale benchmark (not a test; tests/bench is outside the default run).

Generates a site of N HGX servers (tests/fleet.py: 1,000 by default, 8,000 GPUs, about 27,000 objects),
imports it through the site import service (timed), then requests every portal page and inventory list
endpoint as an Administrator through Django's test client and prints, for each: the status, the number
of queries, the longest SQL statement (an unbounded IN list or OR chain grows it with the fleet), p50
and p95 server time over --repeat requests, and the response size.

Usage: .venv/bin/python tests/bench/bench_fleet.py [--nodes 1000] [--repeat 20] [--bulk]
       DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python tests/bench/bench_fleet.py
SQLite: a database in a fresh state directory. PostgreSQL: it creates and drops its own database
(appliance_fleet_bench) next to the one named. --bulk writes the fleet with bulk_create instead of the
import (seconds instead of minutes; no import time printed).
"""

import argparse
import os
import statistics
import tempfile
import time

from benchdb import create_database, drop_database, setup_django

BENCH_DB = "appliance_fleet_bench"
TARGET_P95_MS = 150


def targets(node_id: int) -> list[tuple[str, str]]:
    """(label, path) of every page and list endpoint that grows with the fleet."""
    return [
        ("Overview", "/"),
        ("Node list", "/inventory/nodes/"),
        ("Node page", "/inventory/nodes/gpu0500/"),
        ("Fabric", "/inventory/fabric/"),
        ("Fabric, problems", "/inventory/fabric/?state=problem"),
        ("Fabric, one node", "/inventory/fabric/?node=gpu0500"),
        ("Storage", "/inventory/storage/"),
        ("Pools", "/inventory/pools/"),
        ("slurm.conf download", "/inventory/pools/fleet/files/slurm.conf"),
        ("Audit log", "/audit/"),
        ("API appliances", "/api/v1/inventory/appliances/"),
        ("API nodes", "/api/v1/inventory/nodes/"),
        ("API nodes, 1000 a page", "/api/v1/inventory/nodes/?page_size=1000"),
        ("API node", f"/api/v1/inventory/nodes/{node_id}/"),
        ("API GPUs", "/api/v1/inventory/gpus/"),
        ("API HCAs", "/api/v1/inventory/hcas/"),
        ("API HCA ports", "/api/v1/inventory/hca-ports/"),
        ("API switches", "/api/v1/inventory/switches/"),
        ("API networks", "/api/v1/inventory/networks/"),
        ("API filesystems", "/api/v1/inventory/filesystems/"),
        ("API pools", "/api/v1/inventory/pools/"),
        ("API platforms", "/api/v1/inventory/platforms/"),
    ]


def measure(client, path: str, repeat: int) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        response = client.get(path)
    # Read them now: the next request empties the connection's query log.
    statements = [q["sql"] for q in queries.captured_queries]
    body = response.content
    times = []
    # At least 3 samples; past 10 s on one target its figures are clear enough.
    while len(times) < repeat and (len(times) < 3 or sum(times) < 10_000):
        started = time.perf_counter()
        client.get(path)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return {"status": response.status_code, "queries": len(statements), "bytes": len(body),
            "longest_sql": max(map(len, statements), default=0),
            "p50": statistics.median(times), "p95": times[max(0, round(0.95 * len(times)) - 1)]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--bulk", action="store_true", help="bulk_create the fleet instead of importing it")
    args = parser.parse_args()

    given_url = os.environ.get("DATABASE_URL", "")
    if given_url.startswith("postgres"):
        os.environ["DATABASE_URL"] = create_database(given_url, BENCH_DB)
        os.environ.pop("DATABASE_MIGRATE_URL", None)
    state = tempfile.mkdtemp(prefix="bench-fleet-")
    try:
        setup_django(state)
        return run(args)
    finally:
        if given_url.startswith("postgres"):
            from django.db import connections

            connections.close_all()
            drop_database(given_url, BENCH_DB)


def run(args) -> int:
    from django.db import connection
    from django.test import Client

    from appliance.accounts.services import create_user
    from appliance.core.roles import Role
    from appliance.core.serving import freeze_start_up_objects
    from appliance.inventory.models import Node
    from tests import fleet

    print(f"database: {connection.vendor} · fleet: {args.nodes} HGX servers ({args.nodes * 8:,} GPUs) · "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (times scale with it)")
    started = time.perf_counter()
    if args.bulk:
        fleet.bulk_fleet(args.nodes)
        print(f"bulk-created in {time.perf_counter() - started:.1f} s")
    else:
        result = fleet.import_fleet(args.nodes)
        print(f"site import: {sum(result.counts().values()):,} objects in {time.perf_counter() - started:.1f} s")
    admin = create_user("bench-admin", Role.ADMINISTRATOR, "bench-Password-93kd")
    client = Client(raise_request_exception=False)  # a 500 is a figure here, not the end of the run
    client.force_login(admin)
    # As a serving process after start-up (appliance/wsgi.py): the first request loads the URL conf and
    # templates, then the start-up objects are frozen out of the cyclic collector's passes.
    client.get("/")
    freeze_start_up_objects()
    node_id = Node.objects.get(name="gpu0500" if args.nodes >= 500 else fleet.node_name(0)).pk

    header = f"{'page / endpoint':<26} {'status':>6} {'queries':>7} {'longest SQL':>11} {'p50 ms':>8} {'p95 ms':>8} {'bytes':>11}"
    print(header)
    print("-" * len(header))
    over = []
    for label, path in targets(node_id):
        if args.nodes < 500:
            path = path.replace("gpu0500", fleet.node_name(0))
        m = measure(client, path, args.repeat)
        flag = "  << over target" if m["p95"] > TARGET_P95_MS or m["status"] >= 500 else ""
        if flag:
            over.append(label)
        print(f"{label:<26} {m['status']:>6} {m['queries']:>7} {m['longest_sql']:>11,} {m['p50']:>8.1f} "
              f"{m['p95']:>8.1f} {m['bytes']:>11,}{flag}")
    print(f"target: p95 <= {TARGET_P95_MS} ms; over it: {', '.join(over) or 'none'}; "
          f"load average now {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
