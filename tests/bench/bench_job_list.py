"""The job list and a job's page at fleet scale, with minutes that changed hands (a benchmark, not a test;
tests/bench is outside the default run).

A fleet of N HGX nodes (8 GPUs each) with per-minute GPU rollups of the first --minutes of the day
(benchdb.rollup_fleet: training jobs on node pairs, inference services), the hours before the newest
folded into per-hour rows as the appliance's fold does, and one GPU-minute in --handover (default 200)
changed hands: its `holders` names its job for 40 s and another job, held nowhere else, for 20 s. Times
telemetry.queries.jobs over 1 and 24 hours (what the job list and its API answer) and queries.job of a
training job (its page), at "now" half an hour into the newest hour, and checks that every holder of a
minute that changed hands is listed. Prints p50 and p95 (issue 35's target for the job list: 150 ms).

Usage: .venv/bin/python tests/bench/bench_job_list.py [--nodes 1000] [--minutes 150] [--repeat 10] [--partial-index]
       DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python tests/bench/bench_job_list.py
"""

import os
import statistics
import sys
import time
from datetime import timedelta

from benchdb import ROLLUP_T0, bench_main, rollup_fleet

BENCH_DB = "appliance_job_list_bench"


def main() -> int:
    def arguments(parser):
        parser.add_argument("--nodes", type=int, default=1000)
        parser.add_argument("--minutes", type=int, default=150)
        parser.add_argument("--handover", type=int, default=200, help="one GPU-minute in this many changed hands")
        parser.add_argument("--repeat", type=int, default=10)
        parser.add_argument("--partial-index", action="store_true",
                            help="then time the minutes that changed hands again with an index of them alone")

    return bench_main(run, description=__doc__, database=BENCH_DB, arguments=arguments)


def timed(function, repeat: int) -> tuple[float, float, int, object]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    times = []
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            result = function()
            times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return statistics.median(times), times[max(0, round(0.95 * len(times)) - 1)], len(captured), result


def run(args) -> int:
    from django.db import connection
    from django.db.models import Count, Max, Min, Sum

    from appliance.inventory.models import Node
    from appliance.telemetry import queries, services
    from tests import fleet

    print(f"database: {connection.vendor} · fleet: {args.nodes} HGX servers ({args.nodes * 8:,} GPUs) · "
          f"{args.minutes} minutes · load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    fleet.bulk_fleet(args.nodes)
    node_ids = list(Node.objects.filter(gpus__isnull=False).distinct().order_by("name").values_list("pk", flat=True))
    seconds = rollup_fleet(node_ids, args.minutes, with_frames=False)
    print(f"generated {len(node_ids) * 8 * args.minutes:,} GPU rows in {seconds:.0f} s")
    epoch = "EXTRACT(EPOCH FROM start)" if connection.vendor == "postgresql" else "strftime('%%s', start)"
    with connection.cursor() as cursor:
        # a GPU-minute in `handover` changed hands: its job 40 s, a job held nowhere else 20 s
        cursor.execute("UPDATE telemetry_gpurollup SET holders = job || ':40,hand-' || CAST(node_id AS TEXT) || '-' "
                       "|| CAST(gpu AS TEXT) || ':20' WHERE step = 60 AND job <> '' AND (node_id * 7 + gpu * 3 + "
                       f"CAST({epoch} AS BIGINT) / 60) %% %s = 0", [args.handover])
        handed = cursor.rowcount
    print(f"{handed:,} GPU-minutes changed hands")
    hours = args.minutes // 60
    started = time.perf_counter()
    for hour in range(hours):
        services.fold_hour(ROLLUP_T0 + timedelta(hours=hour))
    print(f"folded {hours} hours in {time.perf_counter() - started:.0f} s")
    now = ROLLUP_T0 + timedelta(hours=hours, minutes=min(30, args.minutes - hours * 60), seconds=30)
    failures = 0
    for name in ("1h", "24h"):
        p50, p95, count, result = timed(lambda name=name: queries.jobs(name, now=now), args.repeat)
        listed = {job["job"] for job in result}
        print(f"jobs {name}: {len(result):,} jobs, p50 {p50:.0f} ms, p95 {p95:.0f} ms, {count} queries "
              f"(target 150 ms)")
        if name == "1h":
            first, last = queries._window(queries.range_of(name), now)
            with connection.cursor() as cursor:
                cursor.execute("SELECT holders FROM telemetry_gpurollup WHERE step = 60 AND holders <> '' "
                               "AND start >= %s AND start <= %s", [first, last])
                expected = {part.rsplit(":", 1)[0] for (text,) in cursor.fetchall() for part in text.split(",")}
            missing = expected - listed
            print(f"  holders of the hour's minutes that changed hands: {len(expected):,}, missing from the list: "
                  f"{len(missing):,}")
            failures += bool(missing)
    # what the list's two kinds of query cost apart, over the hour's minutes: the minutes each job held
    # most of (the covering index alone) and the minutes that changed hands (a row read for its holders)
    from appliance.telemetry.models import GpuRollup

    first, last = queries._window(queries.range_of("1h"), now)
    minutes = GpuRollup.objects.filter(step=60, instance=-1, start__gte=first, start__lte=last).order_by()
    for name, read in (
            ("minutes held most of", lambda: list(minutes.exclude(job="").values("job", "node", "gpu").annotate(
                first_=Min("start"), last_=Max("start"), total=Sum("util"), count=Count("util"), buckets=Count("job"))
                .values_list("job", "node", "gpu", "first_", "last_", "total", "count", "buckets"))),
            ("minutes that changed hands", lambda: list(minutes.exclude(holders="").values_list(
                "job", "node", "gpu", "start", "util", "holders")))):
        p50, p95, _, rows = timed(read, args.repeat)
        print(f"  the hour's {name} alone: {len(rows):,} rows, p50 {p50:.0f} ms, p95 {p95:.0f} ms")
    if args.partial_index:
        # what an index of the minutes that changed hands alone would give (not in the schema: measured here)
        with connection.cursor() as cursor:
            cursor.execute("CREATE INDEX bench_gpu_handed_over ON telemetry_gpurollup (step, instance, start) "
                           "WHERE NOT (holders = '')")
            sql, params = minutes.exclude(holders="").values_list("holders").query.sql_with_params()
            cursor.execute(("EXPLAIN QUERY PLAN " if connection.vendor == "sqlite" else "EXPLAIN ") + sql, params)
            plan = " / ".join(str(row[-1]) for row in cursor.fetchall())
        p50, p95, _, rows = timed(lambda: list(minutes.exclude(holders="").values_list(
            "job", "node", "gpu", "start", "util", "holders")), args.repeat)
        print(f"  with a partial index (step, instance, start) WHERE holders <> '': the minutes that changed hands alone: "
              f"{len(rows):,} rows, p50 {p50:.0f} ms, p95 {p95:.0f} ms ({plan[:160]})")
        p50, p95, count, result = timed(lambda: queries.jobs("1h", now=now), args.repeat)
        print(f"  with it, jobs 1h: {len(result):,} jobs, p50 {p50:.0f} ms, p95 {p95:.0f} ms, {count} queries")
    job = "100000"
    p50, p95, count, result = timed(lambda: queries.job(job), args.repeat)
    print(f"job {job}: {result['gpu_count']} GPUs, {len(result['t'])} points, {result['gpu_hours']} GPU-hours,"
          f" p50 {p50:.0f} ms, p95 {p95:.0f} ms, {count} queries")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
