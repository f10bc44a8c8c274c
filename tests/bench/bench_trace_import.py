"""Trace import benchmark (not a test; tests/bench is outside the default run). Prints rows/s of
`telemetry import` for a trace of 1,000,000 rows (1,000 GPUs x 1,000 samples, about two thirds of them at
0%, as in Alibaba's GPU trace) as CSV, gzipped CSV and Parquet, each into an empty trace table, and the time
of the source report over it.

Usage: .venv/bin/python tests/bench/bench_trace_import.py            (SQLite, in a state directory of its own)
       DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python tests/bench/bench_trace_import.py
It creates and drops its own database (appliance_trace_bench) next to the one named.
Options: --rows N (default 1,000,000), --entities N (default 1,000).
"""

import argparse
import gzip
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from benchdb import create_database, drop_database, setup_django

BENCH_DB = "appliance_trace_bench"


def make_table(rows: int, entities: int) -> pa.Table:
    random = np.random.default_rng(13)
    per_entity = rows // entities
    utilization = np.where(random.random(rows) < 0.66, 0.0, np.round(random.random(rows), 3))
    return pa.table({
        "timestamp": np.tile(np.arange(per_entity, dtype=np.int64) * 15, entities)[:rows],
        "gpu": np.repeat([f"gpu-{i:05d}" for i in range(entities)], per_entity)[:rows],
        "gpu_util": utilization,
        "gpu_mem": np.round(random.random(rows) * 80, 2),
        "job": np.repeat([f"job-{i // 8}" for i in range(entities)], per_entity)[:rows],
    })


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--entities", type=int, default=1_000)
    args = parser.parse_args()

    given_url = os.environ.get("DATABASE_URL", "")
    if given_url.startswith("postgres"):
        os.environ["DATABASE_URL"] = create_database(given_url, BENCH_DB)
        os.environ.pop("DATABASE_MIGRATE_URL", None)
    state = tempfile.mkdtemp(prefix="bench-traces-")
    try:
        setup_django(state)
        return run(args, Path(state))
    finally:
        if given_url.startswith("postgres"):
            from django.db import connections

            connections.close_all()
            drop_database(given_url, BENCH_DB)
        shutil.rmtree(state, ignore_errors=True)


def run(args, state: Path) -> int:
    from django.db import connection

    from appliance.traces.models import Trace
    from appliance.traces.services import import_trace, source_report

    rows = args.rows - args.rows % args.entities
    table = make_table(rows, args.entities)
    files = {"csv": state / "trace.csv", "csv.gz": state / "trace.csv.gz", "parquet": state / "trace.parquet"}
    pacsv.write_csv(table, files["csv"])
    with files["csv"].open("rb") as plain, gzip.open(files["csv.gz"], "wb", compresslevel=6) as packed:
        shutil.copyfileobj(plain, packed, 1 << 20)
    pq.write_table(table, files["parquet"])
    print(f"database: {connection.vendor} · {rows:,} rows of {args.entities:,} GPUs · load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (times scale with it)")
    print(f"{'file':<10} {'MiB':>8} {'import s':>9} {'rows/s':>11} {'report s':>9}")
    for label, path in files.items():
        Trace.objects.filter(name="bench").delete()
        started = time.perf_counter()
        trace = import_trace(path, name="bench", value="gpu_util", time="timestamp", entity="gpu",
                             memory="gpu_mem", job="job")
        seconds = time.perf_counter() - started
        started = time.perf_counter()
        report = source_report("bench")
        report_seconds = time.perf_counter() - started
        print(f"{label:<10} {path.stat().st_size / 2**20:>8.1f} {seconds:>9.2f} {trace.rows / seconds:>11,.0f} "
              f"{report_seconds:>9.2f}")
    utilization, entities = report["utilization"], report["entities"]
    print(f"report: zero share {utilization['zero_share']}, mean {utilization['mean']}%, p50 {utilization['p50']}%, "
          f"p90 {utilization['p90']}%; {entities['count']:,} entities, idle majority share "
          f"{entities['idle_majority_share']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
