"""The findings refresh at fleet scale (a benchmark, not a test; tests/bench is outside the default run).

Generates the attribution ledger of a fleet with benchdb.ledger_fleet (default 1,000 nodes x 8 GPUs x
24 hours: 192,000 CauseHour rows; a job per node every four hours, causes spread over every column, so many
jobs cross a detector's threshold), then times `findings.refresh` over the day (the pool detector over the
same rows): the first run opens the findings, the second updates them. Prints rows, seconds, queries and
the findings by kind.

Usage: .venv/bin/python tests/bench/bench_findings.py [--nodes 1000] [--hours 24]
       DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python tests/bench/bench_findings.py
"""

import os
import time
from collections import Counter
from datetime import timedelta

from benchdb import bench_main, ledger_fleet

BENCH_DB = "appliance_findings_bench"


def run(args) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from appliance.analytics import findings
    from appliance.analytics.models import Finding

    print(f"database: {connection.vendor} · fleet: {args.nodes} nodes ({args.nodes * 8:,} GPUs) x {args.hours} h · "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (times scale with it)")
    until = timezone.now().replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    started = time.perf_counter()
    rows = ledger_fleet(args.nodes, args.hours, until)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE analytics_causehour")
    print(f"generated {rows:,} CauseHour rows in {time.perf_counter() - started:.1f} s")
    since = until - timedelta(hours=args.hours)
    for label in ("first refresh (opens)", "second refresh (updates)"):
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            result = findings.refresh(since, until)
            seconds = time.perf_counter() - started
        print(f"{label:<26} {seconds:7.2f} s {len(queries):>6} queries · found {result['found']}, "
              f"opened {len(result['opened'])}, updated {result['updated']}, resolved {len(result['resolved'])}")
    kinds = Counter(Finding.objects.values_list("kind", flat=True))
    print("findings by kind: " + ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items())))
    return 0


def main() -> int:
    def arguments(parser):
        parser.add_argument("--nodes", type=int, default=1000)
        parser.add_argument("--hours", type=int, default=24)

    return bench_main(run, description=__doc__, database=BENCH_DB, arguments=arguments)


if __name__ == "__main__":
    raise SystemExit(main())
