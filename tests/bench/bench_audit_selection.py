"""Filtered audit export benchmark (not a test; tests/bench is outside the default run). Prints, for a
generated log, the time to export the records one filter selects (each with its inclusion proof in a
signed checkpoint) and to verify that bundle offline, for a sparse and a dense selection.

Usage: DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python tests/bench/bench_audit_selection.py
It creates and drops its own database (appliance_audit_selection_bench) next to the one named.
Options: --records N (default 200,000).
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_audit  # noqa: E402

bench_audit.BENCH_DB = "appliance_audit_selection_bench"

# The generated records name node i % 512 as their target: one id selects 1 record in 512; a name
# fragment shared by 100 node names (gpu-node-100..199), about 1 in 5.
SELECTIONS = {"sparse (target_id=7)": {"target_id": "7"}, "dense (target=gpu-node-1)": {"target": "gpu-node-1"}}


def bench(n: int, work: Path) -> None:
    from appliance.audit.export import export_bundle
    from appliance.audit.queries import select_records
    from appliance.audit.verify import verify_bundle

    started = time.perf_counter()
    bench_audit.generate(n)
    print(f"generated and chained {bench_audit.rate(n, time.perf_counter() - started)}")
    for label, filters in SELECTIONS.items():
        out = work / label.split()[0]
        started = time.perf_counter()
        manifest = export_bundle(out, "jsonl", selection=select_records(filters))
        seconds = time.perf_counter() - started
        count = manifest["selection"]["count"]
        proofs = (out / "proofs.jsonl").stat().st_size
        print(f"export {label:<28} {count:>9,} of {n:,} records in {seconds:6.1f} s "
              f"({count / seconds:,.0f} records/s; proofs {proofs / 2**20:,.1f} MiB)")
        result = verify_bundle(out)
        assert result.ok, result.summary()
        print(f"verify {label:<28} {bench_audit.rate(result.records, result.seconds)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    options = parser.parse_args()
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        raise SystemExit("set DATABASE_URL to a PostgreSQL server (the benchmark makes its own database there)")
    os.environ["DATABASE_URL"] = bench_audit.prepare_database(url)
    os.environ["AUDIT_CHECKPOINT_EVERY_RECORDS"] = "1000"
    with tempfile.TemporaryDirectory(prefix="audit-selection-bench-") as work:
        try:
            bench_audit.setup_django(str(Path(work) / "state"))
            bench(options.records, Path(work))
            from django.db import connection

            connection.close()
        finally:
            bench_audit.drop_database(url)


if __name__ == "__main__":
    main()
