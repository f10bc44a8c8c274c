"""What every benchmark needs around its run: a PostgreSQL database of its own, created and dropped next
to the one DATABASE_URL names, and Django set up on a fresh state directory, migrated (`bench_main` does
all of it around a benchmark's `run(args)`); and the fleets the analytics benchmarks generate: per-minute
rollups (`rollup_fleet`, bench_attribution_fleet) and the attribution ledger (`ledger_fleet`, bench_efficiency
and bench_findings)."""

import argparse
import os
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse, urlunparse

REPO = Path(__file__).resolve().parents[2]


def with_database(url: str, database: str) -> str:
    return urlunparse(urlparse(url)._replace(path=f"/{database}"))


def create_database(url: str, database: str) -> str:
    """(Re)create `database` on the server of `url`; returns the URL of it."""
    import psycopg

    with psycopg.connect(with_database(url, "postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {database}")
    return with_database(url, database)


def drop_database(url: str, database: str) -> None:
    import psycopg

    with psycopg.connect(with_database(url, "postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def setup_django(state_dir: str) -> None:
    sys.path.insert(0, str(REPO))
    os.environ["APPLIANCE_STATE_DIR"] = state_dir
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def bench_main(run, *, description: str, database: str, arguments) -> int:
    """Parse the benchmark's arguments (`arguments(parser)` adds them), give it a database of its own when
    DATABASE_URL names a PostgreSQL server (dropped afterwards) and a fresh state directory, and call
    `run(args)`; returns its exit status."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    arguments(parser)
    args = parser.parse_args()
    given_url = os.environ.get("DATABASE_URL", "")
    if given_url.startswith("postgres"):
        os.environ["DATABASE_URL"] = create_database(given_url, database)
        os.environ.pop("DATABASE_MIGRATE_URL", None)
    state = tempfile.mkdtemp(prefix=f"bench-{database}-")
    try:
        setup_django(state)
        return run(args)
    finally:
        if given_url.startswith("postgres"):
            from django.db import connections

            connections.close_all()
            drop_database(given_url, database)


# ---- fleets ---------------------------------------------------------------------------------------------

ROLLUP_T0 = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)

# kind of a training pair's job segment: 0-1 compute, 2 input-bound, 3 straggler, 4 idle allocation,
# 5 a throttled GPU, 6 fabric-bound, 7 no job
GPU_SELECT = """
SELECT node_id, g, -1, 60, start, 60, job, '', '', util, util, sm, fb, 81559.0, sm_clock, reasons, share, nvlink,
       0, 0
FROM (SELECT n.node_id, g.g, m.start, n.inference,
             CASE WHEN n.inference = 1 THEN (CASE WHEN g.g %% 4 = 3 THEN '' ELSE 'svc-' || CAST(n.n AS TEXT) || '-'
                                                  || CAST(g.g AS TEXT) END)
                  WHEN k.kind = 7 THEN '' ELSE CAST(100000 + (n.n / 2) * 10 + m.m / 180 AS TEXT) END AS job,
             CASE WHEN n.inference = 1 THEN (CASE WHEN g.g %% 4 = 0 THEN 3.0 WHEN g.g %% 4 = 3 THEN 0.0 ELSE 65.0 END)
                  WHEN k.kind IN (2, 6) THEN 45.0 + 5 * j.j
                  WHEN k.kind = 3 THEN (CASE WHEN g.g = 0 AND n.n %% 2 = 0 THEN 97.0 ELSE 50.0 + 5 * j.j END)
                  WHEN k.kind = 4 THEN 1.0 WHEN k.kind = 7 THEN 0.0 ELSE 90.0 + 8 * j.j END AS util,
             CASE WHEN n.inference = 1 THEN (CASE WHEN g.g %% 4 = 0 THEN 0.02 WHEN g.g %% 4 = 3 THEN 0.0 ELSE 0.55 END)
                  WHEN k.kind IN (2, 6) THEN 0.3 + 0.1 * j.j
                  WHEN k.kind = 3 THEN (CASE WHEN g.g = 0 AND n.n %% 2 = 0 THEN 0.93 ELSE 0.3 END)
                  WHEN k.kind = 4 THEN 0.005 WHEN k.kind = 7 THEN 0.0 ELSE 0.8 + 0.1 * j.j END AS sm,
             CASE WHEN n.inference = 1 AND g.g %% 4 = 0 THEN 70000.0 WHEN k.kind IN (4, 7) AND n.inference = 0
                  THEN 600.0 ELSE 60000.0 END AS fb,
             CASE WHEN n.inference = 0 AND k.kind = 5 AND g.g = 3 THEN 1500.0 ELSE 1980.0 END AS sm_clock,
             CASE WHEN n.inference = 0 AND k.kind = 5 AND g.g = 3 THEN 64 ELSE 0 END AS reasons,
             CASE WHEN n.inference = 0 AND k.kind = 5 AND g.g = 3 THEN 1.0 ELSE 0.0 END AS share,
             5e10 AS nvlink
      FROM bench_nodes n CROSS JOIN bench_gpus g CROSS JOIN bench_minutes m
      JOIN bench_kinds k ON k.pair = n.n / 2 AND k.segment = m.m / 180
      JOIN bench_jitter j ON j.k = (n.n * 131 + g.g * 71 + m.m * 17) %% 10
      WHERE m.m >= %s AND m.m < %s) AS r
ORDER BY start, node_id, g
"""

NODE_SELECT = """
SELECT node_id, 60, start, 60, 8, {mounts}, fs_read, 1e8, ib_tx, 2e10, 4e11, 0.0, 0, 0.3, 0.02
FROM (SELECT n.node_id, m.start,
             CASE WHEN n.inference = 0 AND k.kind = 2 THEN 19e9 ELSE 1e9 END AS fs_read,
             CASE WHEN n.inference = 0 AND k.kind = 6 THEN 3.5e11 ELSE 2e10 END AS ib_tx
      FROM bench_nodes n CROSS JOIN bench_minutes m JOIN bench_kinds k ON k.pair = n.n / 2 AND k.segment = m.m / 180
      WHERE m.m >= %s AND m.m < %s) AS r
ORDER BY start, node_id
"""

GPU_COLUMNS = ("node_id", "gpu", "instance", "step", "start", "samples", "job", "uuid", "profile", "util", "util_max",
               "sm_active", "fb_used_mib", "fb_total_mib", "sm_clock_mhz", "throttle_reasons", "throttled_share",
               "nvlink_bps", "xid_count", "ecc_dbe")
NODE_COLUMNS = ("node_id", "step", "start", "samples", "gpus", "mounts", "fs_read_bps", "fs_write_bps", "ib_tx_bps",
                "ib_rx_bps", "ib_line_bps", "ib_xmit_wait", "ib_errors", "cpu_busy", "cpu_iowait")


def rollup_fleet(node_ids: list[int], minutes: int, first: int = 0, with_frames: bool = True,
                 fleet_frames: bool = True) -> float:
    """Per-minute GPU and node rollups of minutes [first, first + minutes) from ROLLUP_T0 of every node
    (HGX, 8 GPUs), generated by the database itself (INSERT ... SELECT), the GPU minute frames the
    ingest would have written with them (telemetry.frames.build, unless `with_frames` is False) and the
    fleet minute frames the fold packs once a minute settles (telemetry.frames.build_fleet, unless
    `fleet_frames` is False: a minute still being written has none); returns the seconds taken."""
    from django.db import connection, transaction

    from appliance.telemetry import frames

    started = time.perf_counter()
    pg = connection.vendor == "postgresql"
    mounts = ("CAST('{\"/mnt/scratch\": {\"fstype\": \"lustre\", \"read_bps\": ' || CAST(fs_read AS TEXT) || "
              "', \"write_bps\": 1e8}}' AS jsonb)") if pg else \
             ("'{\"/mnt/scratch\": {\"fstype\": \"lustre\", \"read_bps\": ' || CAST(fs_read AS TEXT) || "
              "', \"write_bps\": 1e8}}'")
    with transaction.atomic(), connection.cursor() as cursor:
        temp = "TEMPORARY" if pg else "TEMP"
        cursor.execute("DROP TABLE IF EXISTS bench_minutes")
        for name in ("bench_nodes", "bench_gpus", "bench_kinds", "bench_jitter"):
            cursor.execute(f"DROP TABLE IF EXISTS {name}")
        cursor.execute(f"CREATE {temp} TABLE bench_minutes (m integer PRIMARY KEY, start {'timestamptz' if pg else 'datetime'})")
        cursor.executemany("INSERT INTO bench_minutes VALUES (%s, %s)",
                           [(m, connection.ops.adapt_datetimefield_value(ROLLUP_T0 + timedelta(minutes=m)))
                            for m in range(first, first + minutes)])
        cursor.execute(f"CREATE {temp} TABLE bench_nodes (n integer, node_id integer, inference integer)")
        cursor.executemany("INSERT INTO bench_nodes VALUES (%s, %s, %s)",
                           [(n, pk, int(n >= len(node_ids) * 3 // 4)) for n, pk in enumerate(node_ids)])
        cursor.execute(f"CREATE {temp} TABLE bench_gpus (g integer)")
        cursor.executemany("INSERT INTO bench_gpus VALUES (%s)", [(g,) for g in range(8)])
        cursor.execute(f"CREATE {temp} TABLE bench_kinds (pair integer, segment integer, kind integer, "
                       "PRIMARY KEY (pair, segment))")
        segments = (first + minutes) // 180 + 1
        cursor.executemany("INSERT INTO bench_kinds VALUES (%s, %s, %s)",
                           [(pair, segment, (pair * 7 + segment * 3) % 8)
                            for pair in range(len(node_ids) // 2 + 1) for segment in range(segments)])
        cursor.execute(f"CREATE {temp} TABLE bench_jitter (k integer PRIMARY KEY, j double precision)")
        cursor.executemany("INSERT INTO bench_jitter VALUES (%s, %s)", [(k, k / 10) for k in range(10)])
        for hour in range(first, first + minutes, 60):
            span = [hour, min(hour + 60, first + minutes)]
            cursor.execute(f"INSERT INTO telemetry_gpurollup ({', '.join(GPU_COLUMNS)}) {GPU_SELECT}", span)
            cursor.execute(f"INSERT INTO telemetry_noderollup ({', '.join(NODE_COLUMNS)}) "
                           f"{NODE_SELECT.format(mounts=mounts)}", span)
            if with_frames:
                frames.build([ROLLUP_T0 + timedelta(minutes=m) for m in range(*span)])
                if fleet_frames:
                    frames.build_fleet([ROLLUP_T0 + timedelta(minutes=m) for m in range(*span)])
    if pg:
        # what autovacuum does to a table after a bulk insert: statistics, and the visibility map an
        # index-only scan needs (the ledger counts each minute's GPU rows from an index)
        with connection.cursor() as cursor:
            for table in ("telemetry_gpurollup", "telemetry_noderollup", "telemetry_gpuminuteframe",
                          "telemetry_fleetminuteframe"):
                cursor.execute(f"VACUUM ANALYZE {table}")
    flush_to_disk()
    return time.perf_counter() - started


def flush_to_disk() -> None:
    """Write what a bulk generation left in memory to disk before anything is timed: the database's own
    log (SQLite's WAL into the database file; PostgreSQL's checkpoint) and the kernel's dirty pages. A day of
    rows written in minutes leaves gigabytes unwritten, which the first fsync of the timed stage (a WAL
    checkpoint of the ledger's upsert) would wait for; an appliance's rows were written over the day."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT" if connection.vendor == "postgresql" else "PRAGMA wal_checkpoint(TRUNCATE)")
    os.sync()



CAUSES = ("busy_s", "idle_unallocated_s", "allocated_idle_s", "input_bound_s", "communication_bound_s",
          "straggler_s", "throttled_s", "memory_only_s")


def ledger_fleet(nodes: int, hours: int, until) -> int:
    """The attribution ledger (CauseHour) of a fleet over the `hours` before `until`: `nodes` nodes of 8 GPUs,
    three quarters in the training pool, a quarter in the inference pool, a job per node every four hours
    among 40 users (none one slot in five), causes spread over every column. Returns the rows written."""
    from appliance.analytics.models import CauseHour
    from appliance.inventory.models import Appliance, Node, Pool, PoolMembership

    appliance = Appliance.objects.create(name="bench")
    training = Pool.objects.create(appliance=appliance, name="training", kind=Pool.Kind.TRAINING)
    inference = Pool.objects.create(appliance=appliance, name="inference", kind=Pool.Kind.INFERENCE)
    Node.objects.bulk_create([Node(appliance=appliance, name=f"gpu{i:04d}", role=Node.Role.GPU,
                                   management_address=f"10.{i // 250}.{i % 250}.10") for i in range(nodes)],
                             batch_size=1000)
    members = list(Node.objects.filter(appliance=appliance).order_by("name"))
    PoolMembership.objects.bulk_create([PoolMembership(pool=inference if i % 4 == 3 else training, node=node)
                                        for i, node in enumerate(members)])
    rng = random.Random(13)
    first = until - timedelta(hours=hours)
    batch, count = [], 0
    for i, node in enumerate(members):
        pool = "inference" if i % 4 == 3 else "training"
        for h in range(hours):
            hour = first + timedelta(hours=h)
            job = f"{100000 + i * 10 + h // 4}" if (h // 4 + i) % 5 else ""
            user = f"user{(i + h // 4) % 40:02d}" if job else ""
            for gpu in range(8):
                seconds = dict.fromkeys(CAUSES, 0.0)
                if job:
                    busy = rng.uniform(1200, 3600)
                    seconds["busy_s"] = busy
                    seconds[CAUSES[rng.randrange(2, 8)]] = 3600 - busy
                else:
                    seconds["idle_unallocated_s"] = 3600.0
                batch.append(CauseHour(hour=hour, node=node, gpu=gpu, job=job, user=user, pool=pool,
                                       gpu_seconds=3600.0, used_seconds=seconds["busy_s"] * 0.9,
                                       memory_held_mib_s=81559.0 * 3600 if job else 0.0,
                                       memory_used_mib_s=rng.uniform(10000, 80000) * 3600 if job else 0.0, **seconds))
            if len(batch) >= 20000:
                CauseHour.objects.bulk_create(batch, batch_size=5000)
                count += len(batch)
                batch = []
    CauseHour.objects.bulk_create(batch, batch_size=5000)
    return count + len(batch)
