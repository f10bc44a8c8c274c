"""Telemetry at fleet scale (a benchmark, not a test; tests/bench is outside the default run).

1. Ingest: every node of an N-node fleet (8 GPUs each) writes one closed minute (8 gpu_rollup, 1
   node_rollup and 2 mount_rollup lines) to the ingest endpoint through Django's test client (the whole
   middleware stack, token check, parse, one transaction); then one node writes an hour it had buffered
   in one body. Prints writes/s and lines/s, with the parse and the database shares.
2. Rollups the portal reads, bulk-generated: per-minute GPU rows for the last --gpu-hours (default 1.25),
   per-minute node rows for the last --node-hours (default 24), per-hour node rows for --hour-days
   (default 30), alerts. Why these spans: the Overview and the node page read, at their default range
   (1 h), the newest hour of per-minute GPU and node rows; the 24 h view of the Overview reads per-minute
   NODE rows only (the heatmap is per node); 7 and 30 days read per-hour rows. An hour and a quarter of
   GPU minutes fills the default window and puts rows outside it, so a read that is not bounded by the
   window's index shows; a full day of GPU minutes (11.5 M rows for 1,000 nodes) only deepens the
   (node, gpu, instance, step, start) and (step, start) B-trees by a level or two, and would take most
   of an hour to generate on SQLite on this shared 2-CPU machine.
3. The Overview and a node page (portal pages and the API endpoints their charts load from), as an
   Administrator: status, queries, p50 and p95 server time (target p95 <= 150 ms). Run it with --nodes 20
   and --nodes 1000 to see the query counts stay the same.
4. The periodic fold of one hour of the whole fleet, the prune, and `telemetry status` at that size.

Usage: .venv/bin/python tests/bench/bench_telemetry_fleet.py [--nodes 1000] [--gpu-hours 1.25] [--repeat 20]
       DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python tests/bench/bench_telemetry_fleet.py
"""

import argparse
import hashlib
import os
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from unittest import mock

from bench_fleet import measure
from benchdb import create_database, drop_database, setup_django

BENCH_DB = "appliance_telemetry_bench"
TARGET_P95_MS = 150
MOUNTS = (("/mnt/scratch", "lustre"), ("/home", "nfs"))


def token_of(name: str) -> str:
    return f"bench-ingest-token-{name}-0000000000"


def minute_body(name: str, start_ns: int, rng: random.Random, job: str) -> str:
    lines = []
    for gpu in range(8):
        util = rng.uniform(0, 100)
        lines.append(f"gpu_rollup,Hostname={name},gpu={gpu},UUID=GPU-{name}-{gpu},hpc_job={job} step=60,samples=60,"
                     f"util={util:.1f},util_max={min(100, util + 10):.1f},sm_active={util / 120:.3f},"
                     f"tensor_active={util / 200:.3f},dram_active={util / 150:.3f},fb_used_mib={rng.uniform(0, 80000):.0f},"
                     f"fb_used_max_mib=80000,fb_total_mib=81559,power_w={100 + util * 5:.1f},power_max_w=700,"
                     f"energy_j={(100 + util * 5) * 60:.0f},temp_c={40 + util / 3:.1f},temp_max_c=80,sm_clock_mhz=1980,"
                     f"throttle_reasons=0,throttled_share=0,pcie_tx_bps=1e9,pcie_rx_bps=1e9,nvlink_bps=5e10,"
                     f"xid_count=0,ecc_dbe=0 {start_ns}")
    lines.append(f"node_rollup,Hostname={name} step=60,samples=60,gpus=8,gpu_util=50,gpu_util_max=100,"
                 f"gpu_fb_used_mib=300000,gpu_power_w=3500,ib_tx_bps=2e10,ib_rx_bps=2e10,ib_line_bps=4e11,"
                 f"ib_xmit_wait=100,ib_errors=0,fs_read_bps=3e9,fs_write_bps=1e8,disk_read_bps=1e6,"
                 f"disk_write_bps=1e6,cpu_busy=0.3,cpu_iowait=0.05 {start_ns}")
    for mount, fstype in MOUNTS:
        lines.append(f"mount_rollup,Hostname={name},mount={mount},fstype={fstype} step=60,read_bps=1.5e9,"
                     f"write_bps=5e7 {start_ns}")
    return "\n".join(lines) + "\n"


def bench_ingest(names: list[str], now: datetime) -> None:
    from django.test import Client

    from appliance.telemetry import ingest

    rng = random.Random(7)
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=1)
    start_ns = int(start.timestamp()) * 10**9
    bodies = [(name, minute_body(name, start_ns, rng, str(1000 + i // 4))) for i, name in enumerate(names)]
    lines = sum(body.count("\n") for _, body in bodies)
    client = Client()
    started = time.perf_counter()
    for name, body in bodies:
        response = client.generic("POST", "/telemetry/ingest/api/v2/write?org=appliance&bucket=rollups&precision=ns",
                                  body, content_type="text/plain", HTTP_AUTHORIZATION=f"Token {token_of(name)}")
        assert response.status_code == 204, response.content
    elapsed = time.perf_counter() - started
    parse_started = time.perf_counter()
    for name, body in bodies:
        ingest.parse(body, name)
    parse_s = time.perf_counter() - parse_started
    print(f"ingest, one minute of every node: {len(bodies)} writes, {lines:,} lines in {elapsed:.2f} s: "
          f"{len(bodies) / elapsed:,.0f} writes/s, {lines / elapsed:,.0f} lines/s "
          f"(parsing alone {lines / parse_s:,.0f} lines/s; a fleet of {len(names)} nodes sends "
          f"{lines / 60:,.0f} lines/s)")

    # one node drains an hour it buffered through an outage: 60 minutes in one body
    name = names[0]
    hour = "".join(minute_body(name, start_ns - minute * 60 * 10**9, rng, "1000") for minute in range(1, 61))
    hour_lines = hour.count("\n")
    started = time.perf_counter()
    response = client.generic("POST", "/telemetry/ingest/api/v2/write?precision=ns", hour, content_type="text/plain",
                              HTTP_AUTHORIZATION=f"Token {token_of(name)}")
    elapsed = time.perf_counter() - started
    assert response.status_code == 204, response.content
    print(f"ingest, an hour of one node in one write: {hour_lines:,} lines, {len(hour) / 2**20:.1f} MiB in "
          f"{elapsed:.2f} s: {hour_lines / elapsed:,.0f} lines/s")


def generate(node_ids: list[int], now: datetime, gpu_hours: float, node_hours: float, hour_days: int) -> None:
    """Per-minute GPU and node rows and per-hour node rows ending at the newest closed minute, written
    with plain INSERTs (bulk_create managed about 500 rows/s on this loaded machine)."""
    import json

    from django.db import connection, transaction

    from appliance.telemetry.models import GpuRollup, HardwareEvent, NodeRollup

    rng = random.Random(11)
    newest = now.replace(second=0, microsecond=0) - timedelta(minutes=2)  # the bench's ingest wrote the minute after
    started = time.perf_counter()
    quote = connection.ops.quote_name

    def insert(model, columns, rows):
        sql = (f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(c) for c in columns)}) "
               f"VALUES ({', '.join(['%s'] * len(columns))}) ON CONFLICT DO NOTHING")  # node 0 wrote an hour above
        with connection.cursor() as cursor:
            cursor.executemany(sql, rows)
        return len(rows)

    def stamp(moment):
        return connection.ops.adapt_datetimefield_value(moment)

    gpu_columns = ["node_id", "gpu", "instance", "step", "start", "samples", "job", "uuid", "profile", "util",
                   "util_max", "sm_active", "fb_used_mib", "fb_total_mib", "power_w", "power_max_w", "energy_j",
                   "temp_c", "throttle_reasons", "xid_count", "ecc_dbe"]
    node_columns = ["node_id", "step", "start", "samples", "gpus", "gpu_util", "gpu_util_max", "gpu_power_w",
                    "ib_tx_bps", "ib_rx_bps", "ib_errors", "fs_read_bps", "fs_write_bps", "cpu_busy", "cpu_iowait",
                    "mounts"]
    mounts = json.dumps({mount: {"fstype": fstype, "read_bps": 1.5e9, "write_bps": 5e7} for mount, fstype in MOUNTS})
    gpu_rows = node_rows = hour_rows = ten_rows = gpu_hour_rows = 0
    with transaction.atomic():
        for m in range(int(gpu_hours * 60)):
            start = stamp(newest - timedelta(minutes=m))
            rows = []
            for i, node_id in enumerate(node_ids):
                job = str(1000 + i // 4)
                for gpu in range(8):
                    util = rng.uniform(0, 100)
                    rows.append((node_id, gpu, -1, 60, start, 60, job, f"GPU-{node_id}-{gpu}", "", util,
                                 min(100.0, util + 10), util / 120, 40000.0, 81559.0, 100 + util * 5, 700.0,
                                 (100 + util * 5) * 60, 40 + util / 3, 0, 0, 0))
            gpu_rows += insert(GpuRollup, gpu_columns, rows)
        for m in range(int(node_hours * 60)):
            start = stamp(newest - timedelta(minutes=m))
            node_rows += insert(NodeRollup, node_columns, [
                (node_id, 60, start, 60, 8, rng.uniform(0, 100), 100.0, 3500.0, 2e10, 2e10, 0, 3e9, 1e8, 0.3, 0.05,
                 mounts) for node_id in node_ids])
        # What the periodic fold keeps up to date: per-hour node rows of every complete hour, per-5-, 10- and 30-minute
        # node rows of every complete 10 minutes of the last day, per-hour GPU rows of the last day.
        last_hour = newest.replace(minute=0) - timedelta(hours=1)
        for h in range(hour_days * 24):
            start = stamp(last_hour - timedelta(hours=h))
            hour_rows += insert(NodeRollup, node_columns, [
                (node_id, 3600, start, 3600, 8, rng.uniform(0, 100), 100.0, 3500.0, 2e10, 2e10, 0, 3e9, 1e8, 0.3,
                 0.05, "{}") for node_id in node_ids])
        # the 2-hour, 6-hour and day buckets that hold those hours (the newest ones partly: folded with each hour)
        for step in (2 * 3600, 6 * 3600, 24 * 3600):
            newest_bucket = int(last_hour.timestamp()) // step * step
            for b in range(hour_days * 24 * 3600 // step + 1):
                start = stamp(datetime.fromtimestamp(newest_bucket - b * step, tz=UTC))
                hour_rows += insert(NodeRollup, node_columns, [
                    (node_id, step, start, step, 8, rng.uniform(0, 100), 100.0, 3500.0, 2e10, 2e10, 0, 3e9, 1e8, 0.3,
                     0.05, "{}") for node_id in node_ids])
        for minutes in (5, 10, 30):
            last_bucket = newest.replace(minute=newest.minute // minutes * minutes) - timedelta(minutes=minutes)
            for t in range(int(node_hours * 60 / minutes)):
                start = stamp(last_bucket - timedelta(minutes=minutes * t))
                ten_rows += insert(NodeRollup, node_columns, [
                    (node_id, minutes * 60, start, minutes * 60, 8, rng.uniform(0, 100), 100.0, 3500.0, 2e10, 2e10, 0,
                     3e9, 1e8, 0.3, 0.05, mounts) for node_id in node_ids])
        for h in range(int(node_hours)):
            start = stamp(last_hour - timedelta(hours=h))
            rows = []
            for i, node_id in enumerate(node_ids):
                job = str(1000 + (i + h) // 4)  # the jobs move on by one node an hour
                for gpu in range(8):
                    util = rng.uniform(0, 100)
                    rows.append((node_id, gpu, -1, 3600, start, 3600, job, f"GPU-{node_id}-{gpu}", "", util,
                                 min(100.0, util + 10), util / 120, 40000.0, 81559.0, 100 + util * 5, 700.0,
                                 (100 + util * 5) * 3600, 40 + util / 3, 0, 0, 0))
            gpu_hour_rows += insert(GpuRollup, gpu_columns, rows)
        events = [HardwareEvent(node_id=node_id, kind="xid", gpu=3, time=newest - timedelta(minutes=i),
                                message="XID 79: GPU has fallen off the bus") for i, node_id in enumerate(node_ids[::5])]
        HardwareEvent.objects.bulk_create(events)
    # and the fleet's rows, what the folds sum from the node rows of every level (timed: the fleet's part
    # of the periodic fold)
    from appliance.telemetry import services
    from appliance.telemetry.models import FleetRollup

    folded = time.perf_counter()
    for step in (60, 300, 600, 1800, 3600, 2 * 3600, 6 * 3600, 24 * 3600):
        services.fold_fleet(step, newest - timedelta(days=hour_days + 2), newest)
    print(f"fleet rows summed from every node row kept: {FleetRollup.objects.count():,} in "
          f"{time.perf_counter() - folded:.1f} s")
    print(f"generated {gpu_rows + node_rows + hour_rows + ten_rows + gpu_hour_rows:,} rows in "
          f"{time.perf_counter() - started:.0f} s: {gpu_rows:,} per-minute GPU rows ({gpu_hours:g} h), "
          f"{gpu_hour_rows:,} per-hour GPU rows ({int(node_hours)} h), {node_rows:,} per-minute node rows "
          f"({node_hours:g} h), {ten_rows:,} per-5-, 10- and 30-minute node rows ({node_hours:g} h), {hour_rows:,} per-hour, "
          f"per-6-hour and per-day node rows ({hour_days} days), {len(events)} alerts")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    else:
        # The generation left 1.5 GB in SQLite's write-ahead log, whose index every read of a page then
        # searches (measured: the Overview 1.3 to 1.5 times as long). An appliance's steady writes keep it
        # short: a checkpoint restarts it every thousand pages.
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def targets(node: str, job: str) -> list[tuple[str, str]]:
    return [
        ("Overview page", "/"),
        ("Telemetry page", "/telemetry/"),
        ("Node telemetry page", f"/telemetry/nodes/{node}/"),
        ("Inventory node page", f"/inventory/nodes/{node}/"),
        ("API live summary", "/api/v1/telemetry/live/"),
        ("API overview 1h", "/api/v1/telemetry/overview/?range=1h"),
        ("API overview 6h", "/api/v1/telemetry/overview/?range=6h"),
        ("API overview 24h", "/api/v1/telemetry/overview/?range=24h"),
        ("API overview 7d", "/api/v1/telemetry/overview/?range=7d"),
        ("API node 1h", f"/api/v1/telemetry/nodes/{node}/?range=1h"),
        ("API node 24h", f"/api/v1/telemetry/nodes/{node}/?range=24h"),
        ("API GPU 1h", f"/api/v1/telemetry/nodes/{node}/gpus/3/?range=1h"),
        ("API GPU 24h", f"/api/v1/telemetry/nodes/{node}/gpus/3/?range=24h"),
        ("Jobs page (24h)", "/telemetry/jobs/"),
        ("API jobs 1h", "/api/v1/telemetry/jobs/?range=1h"),
        ("API jobs 24h", "/api/v1/telemetry/jobs/?range=24h"),
        ("Job page", f"/telemetry/jobs/{job}/"),
        ("API job", f"/api/v1/telemetry/jobs/{job}/"),
        ("API alerts", "/api/v1/telemetry/alerts/"),
    ]


def bench_pages(node: str, job: str, repeat: int) -> None:
    from django.test import Client

    from appliance.accounts.services import create_user
    from appliance.core.roles import Role
    from appliance.core.serving import freeze_start_up_objects

    admin = create_user("bench-admin", Role.ADMINISTRATOR, "bench-Password-93kd")
    client = Client(raise_request_exception=False)
    client.force_login(admin)
    client.get("/")
    freeze_start_up_objects()
    header = f"{'page / endpoint':<24} {'status':>6} {'queries':>7} {'longest SQL':>11} {'p50 ms':>8} {'p95 ms':>8} {'bytes':>11}"
    print(header)
    print("-" * len(header))
    over = []
    for label, path in targets(node, job):
        m = measure(client, path, repeat)
        flag = "  << over target" if m["p95"] > TARGET_P95_MS or m["status"] >= 400 else ""
        if flag:
            over.append(label)
        print(f"{label:<24} {m['status']:>6} {m['queries']:>7} {m['longest_sql']:>11,} {m['p50']:>8.1f} "
              f"{m['p95']:>8.1f} {m['bytes']:>11,}{flag}")
    print(f"target: p95 <= {TARGET_P95_MS} ms; over it: {', '.join(over) or 'none'}")


def bench_fold_prune_status(now: datetime) -> None:
    from appliance.telemetry import services
    from appliance.telemetry.models import GpuRollup

    hour = (now.replace(second=0, microsecond=0) - timedelta(minutes=2)).replace(minute=0) - timedelta(hours=1)
    rows = GpuRollup.objects.filter(step=60, start__gte=hour, start__lt=hour + timedelta(hours=1)).count()
    started = time.perf_counter()
    gpu_rows, node_rows = services.fold_hour(hour)
    print(f"fold of one hour of the fleet: {rows:,} per-minute GPU rows into {gpu_rows:,} GPU and {node_rows:,} "
          f"node hour rows in {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    counts = services.prune()
    print(f"prune (nothing past the retention yet: {sum(counts.values())} rows): {time.perf_counter() - started:.2f} s")
    times = []
    for _ in range(5):
        started = time.perf_counter()
        status = services.collector_status()
        times.append((time.perf_counter() - started) * 1000)
    print(f"collector_status of {len(status):,} nodes: median {statistics.median(times):.0f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpu-hours", type=float, default=1.25)
    parser.add_argument("--node-hours", type=float, default=24)
    parser.add_argument("--hour-days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    given_url = os.environ.get("DATABASE_URL", "")
    if given_url.startswith("postgres"):
        os.environ["DATABASE_URL"] = create_database(given_url, BENCH_DB)
        os.environ.pop("DATABASE_MIGRATE_URL", None)
    state = tempfile.mkdtemp(prefix="bench-telemetry-")
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
    from django.db.models import QuerySet
    from django.utils import timezone

    from appliance.inventory.models import Node
    from appliance.telemetry.models import NodeCollector
    from tests import fleet

    print(f"database: {connection.vendor} · fleet: {args.nodes} HGX servers ({args.nodes * 8:,} GPUs) · "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (times scale with it)")
    started = time.perf_counter()
    fleet.bulk_fleet(args.nodes)
    nodes = list(Node.objects.filter(gpus__isnull=False).distinct().order_by("name").values_list("pk", "name"))
    issued = timezone.now()
    QuerySet(NodeCollector).bulk_create([
        NodeCollector(node_id=pk, token=token_of(name), token_digest=hashlib.sha256(token_of(name).encode()).hexdigest(),
                      issued_at=issued) for pk, name in nodes], batch_size=500)
    print(f"fleet and collectors bulk-created in {time.perf_counter() - started:.1f} s")
    now = datetime.now(UTC)
    bench_ingest([name for _, name in nodes], now)
    generate([pk for pk, _ in nodes], now, args.gpu_hours, args.node_hours, args.hour_days)
    node = nodes[len(nodes) // 2][1]
    # The pages are read with the clock half a minute after the minute the ingest wrote closed (its newest
    # bucket): every GPU live, however long the generation took.
    clock = now.replace(second=30, microsecond=0)
    with mock.patch("django.utils.timezone.now", lambda: clock):
        bench_pages(node, str(1000 + len(nodes) // 2 // 4), args.repeat)  # the job of that node (generate's layout)
    bench_fold_prune_status(now)
    print(f"load average now {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
