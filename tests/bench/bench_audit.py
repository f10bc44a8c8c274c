"""Audit log benchmark (not a test; tests/bench is outside the default run). Prints:

- append rate through audit.record() (hash chain + Merkle frontier + signed checkpoints) on
  PostgreSQL, one writer and 8 writer processes, next to plain writes of the same rows into a
  copy of the table (same indexes, no chain, no triggers): each record its own transaction; 1,000
  records a transaction one statement each; and 1,000 a transaction inside audit.batch() (one COPY),
  next to plain INSERTs of those rows (executemany) and a plain COPY of them;
- offline verification rate of an exported bundle, next to raw SHA-256 of the same line bytes;
- export time of 1,000,000 records (jsonl, and one display format).

Usage: DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python tests/bench/bench_audit.py
It creates and drops its own database (appliance_audit_bench) next to the one named.
Options: --records N (default 1,000,000), --appends N (default 20,000).
"""

import argparse
import hashlib
import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchdb import REPO, create_database, drop_database, setup_django

BENCH_DB = "appliance_audit_bench"


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:>12,.0f} records/s  ({n:,} in {seconds:.2f} s)"


def sample_details(i: int) -> dict:
    return {"changes": {"state": ["discovered", "provisioning"], "description": ["", f"rack {i % 40}"]},
            "node": f"gpu-node-{i % 512:03d}"}


# -- appends ------------------------------------------------------------------------------------------

def append_through_record(n: int, per_transaction: int, writer: int = 0, batched: bool = False) -> None:
    from django.db import connections, transaction

    from appliance import audit
    from appliance.core import context

    with context.use(context.ActionContext(channel="api", request_id=f"bench-{writer}", source_address="10.0.0.7",
                                           user_agent="bench", actor_id=3, actor_username="admin",
                                           actor_roles=("administrator",))):
        done = 0
        while done < n:
            batch = min(per_transaction, n - done)
            if per_transaction == 1:
                audit.record("inventory.site.import", target_type="inventory.node", target_id=str(done),
                             target_name=f"gpu-node-{done}", details=sample_details(done))
            else:
                with audit.batch() if batched else transaction.atomic():
                    for i in range(batch):
                        audit.record("inventory.site.import", target_type="inventory.node", target_id=str(done + i),
                                     target_name=f"gpu-node-{done + i}", details=sample_details(done + i))
            done += batch
    connections.close_all()


def plain_rows(n: int, start: int):
    import json

    now = datetime.now(UTC)
    for i in range(n):
        yield (start + i, uuid.uuid4(), now, "inventory.site.import", "configuration", "medium", 3, "admin",
               json.dumps(["administrator"]), "api", "10.0.0.7", "bench", "bench-0", "import", "inventory.node",
               str(i), f"gpu-node-{i}", "success", "", json.dumps(sample_details(i)), "0" * 64,
               hashlib.sha256(f"{start + i}".encode()).hexdigest())


def plain_insert(n: int, per_transaction: int, start: int, method: str = "each") -> None:
    """Plain rows into the copy of the table: one INSERT each, executemany (psycopg pipelines the
    INSERTs), or COPY (what audit.batch() uses)."""
    from django.db import connection, connections, transaction

    columns = ("sequence, uuid, timestamp, event, category, severity, actor_id, actor_username, actor_roles, "
               "channel, source_address, user_agent, request_id, action, target_type, target_id, target_name, "
               "outcome, reason, details, prev_hash, hash")
    sql = f"INSERT INTO bench_plain ({columns}) VALUES ({', '.join(['%s'] * 22)})"
    rows = list(plain_rows(n, start))
    for offset in range(0, n, per_transaction):
        with transaction.atomic(), connection.cursor() as cursor:
            if method == "copy":
                with cursor.cursor.copy(f"COPY bench_plain ({columns}) FROM STDIN") as copy:
                    for row in rows[offset:offset + per_transaction]:
                        copy.write_row(row)
            elif method == "executemany":
                cursor.executemany(sql, rows[offset:offset + per_transaction])
            else:
                for row in rows[offset:offset + per_transaction]:
                    cursor.execute(sql, row)
    connections.close_all()


def durability(synchronous_commit: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"SET synchronous_commit TO {synchronous_commit}")


def _worker(kind: str, n: int, per_transaction: int, writer: int, state_dir: str, barrier, url: str,
            synchronous_commit: str, batched: bool):
    os.environ["DATABASE_URL"] = url
    os.environ["APPLIANCE_STATE_DIR"] = state_dir
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "appliance.settings")
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    durability(synchronous_commit)
    barrier.wait()
    if kind == "record":
        append_through_record(n, per_transaction, writer, batched)
    else:
        plain_insert(n, per_transaction, start=10_000_000 * (writer + 1) + (100_000_000 if kind == "copy" else 0),
                     method=kind)


def run_parallel(kind: str, total: int, writers: int, per_transaction: int, state_dir: str, url: str,
                 synchronous_commit: str, batched: bool) -> float:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(writers + 1)
    processes = [context.Process(target=_worker, args=(kind, total // writers, per_transaction, w, state_dir,
                                                       barrier, url, synchronous_commit, batched))
                 for w in range(writers)]
    for process in processes:
        process.start()
    barrier.wait()
    started = time.perf_counter()
    for process in processes:
        process.join()
        if process.exitcode != 0:
            raise SystemExit(f"a {kind} writer failed with exit code {process.exitcode}")
    return time.perf_counter() - started


def bench_appends(n: int, state_dir: str, url: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE bench_plain (LIKE audit_auditrecord INCLUDING ALL)")
    print("\n== append (PostgreSQL; chain + Merkle frontier + a signed checkpoint every 1,000 records) ==")
    print("plain = the same rows into a copy of the table (same indexes, no chain), written the same way")
    modes = [(1, "on", False, "1 record a transaction", ("each",)),
             (1, "off", False, "1 record a transaction, synchronous_commit=off (no fsync wait per commit)", ("each",)),
             (1000, "on", False, "1,000 records a transaction, one statement each", ("each",)),
             (1000, "on", True, "1,000 records a transaction, written together (audit.batch())",
              ("executemany", "copy"))]
    url = os.environ["DATABASE_URL"]
    for per_transaction, synchronous_commit, batched, label, methods in modes:
        for writers in (1, 8):
            with connection.cursor() as cursor:
                cursor.execute("TRUNCATE bench_plain")
            if writers == 1:
                durability(synchronous_commit)
                started = time.perf_counter()
                append_through_record(n, per_transaction, batched=batched)
                chained = time.perf_counter() - started
                plain = {}
                for method in methods:
                    durability(synchronous_commit)
                    started = time.perf_counter()
                    plain_insert(n, per_transaction, start=1 + 10_000_000 * len(plain), method=method)
                    plain[method] = time.perf_counter() - started
            else:
                chained = run_parallel("record", n, 8, per_transaction, state_dir, url, synchronous_commit, batched)
                plain = {method: run_parallel(method, n, 8, per_transaction, state_dir, url, synchronous_commit,
                                              batched) for method in methods}
            print(f"{'single writer' if writers == 1 else '8 writer processes'}, {label}:")
            print(f"  audit.record()        {rate(n, chained)}")
            for method, seconds in plain.items():
                name = {"each": "plain INSERT", "executemany": "plain INSERT (many)", "copy": "plain COPY"}[method]
                print(f"  {name:<21} {rate(n, seconds)}   ratio {seconds / chained:.2f} x")
    from appliance.audit.verify_database import verify_database

    result = verify_database(record_event=False)
    print(f"live log after the appends: {result.summary()} (verify --database {result.records / result.seconds:,.0f}"
          " records/s)")


# -- a million records, generated straight into the table ---------------------------------------------

def generate(n: int) -> None:
    """Chain n records in Python and COPY them in: the same bytes record() would write, without
    n round trips. Checkpoints every 1,000 records, signed, and the chain head, as record() leaves them."""
    from django.db import connection

    from appliance.audit import chain, merkle, signing
    from appliance.audit.checkpoints import prefix_frontier
    from appliance.audit.models import PAYLOAD_COLUMNS, AuditCheckpoint, ChainHead, payload_from_values

    key = signing.load_signing_key()
    with connection.cursor() as cursor:
        cursor.execute("SELECT COALESCE(MAX(sequence), 0) FROM audit_auditrecord")
        start = cursor.fetchone()[0]
    head = ChainHead.objects.get()
    prev, frontier = head.hash, prefix_frontier(start)
    base = datetime.now(UTC) - timedelta(days=400)
    columns = ", ".join(PAYLOAD_COLUMNS + ("hash",))
    checkpoints = []
    import json

    raw = connection.connection if connection.connection else (connection.ensure_connection() or connection.connection)
    with raw.cursor() as cursor, cursor.copy(f"COPY audit_auditrecord ({columns}) FROM STDIN") as copy:
        for i in range(1, n + 1):
            sequence = start + i
            values = (sequence, uuid.uuid4(), base + timedelta(milliseconds=i * 30), "inventory.node.update",
                      "configuration", "low", 3, "admin", ["administrator"], "api", "10.0.0.7",
                      "Mozilla/5.0 (X11; Linux x86_64)", f"req-{i // 3}", "update", "inventory.node", str(i % 512),
                      f"gpu-node-{i % 512:03d}", "success", "", sample_details(i), prev)
            digest = hashlib.sha256(chain.canonical(payload_from_values(values))).digest()
            prev = digest.hex()
            merkle.frontier_extend(frontier, (hashlib.sha256(b"\x00" + digest).digest(),))
            row = list(values) + [prev]
            row[8], row[19] = json.dumps(row[8]), json.dumps(row[19])
            copy.write_row(row)
            if sequence % 1000 == 0 or i == n:
                stamp = values[2]
                checkpoint = AuditCheckpoint(tree_size=sequence, root_hash=merkle.frontier_root(frontier).hex(),
                                             last_hash=prev, frontier=merkle.frontier_to_json(frontier),
                                             timestamp=stamp, key_id=key.key_id)
                checkpoint.signature = key.sign(chain.signed_statement(checkpoint.statement()))
                checkpoints.append(checkpoint)
    raw.commit()
    # The head first: its trigger wants the records there, the checkpoints' trigger wants the head past them.
    ChainHead.objects.filter(pk=1).update(sequence=start + n, hash=prev)
    AuditCheckpoint.objects.bulk_create(checkpoints)


def bench_export_and_verify(n: int, work: Path) -> None:
    from appliance.audit import chain
    from appliance.audit.export import export_bundle
    from appliance.audit.verify import verify_bundle

    print(f"\n== {n:,} records: generate, export, verify ==")
    started = time.perf_counter()
    generate(n)
    print(f"generated and chained {rate(n, time.perf_counter() - started)}")
    for fmt in ("jsonl", "cef"):
        out = work / f"bundle-{fmt}"
        started = time.perf_counter()
        manifest = export_bundle(out, fmt)
        seconds = time.perf_counter() - started
        size = sum(p.stat().st_size for p in out.iterdir())
        print(f"export {fmt:<5} {manifest['range']['count']:,} records in {seconds:.1f} s "
              f"({manifest['range']['count'] / seconds:,.0f} records/s, bundle {size / 2**20:,.0f} MiB)")
    bundle = work / "bundle-jsonl"
    records = bundle / "records.jsonl"
    started = time.perf_counter()
    count = 0
    with records.open("rb", buffering=1 << 20) as handle:
        for line in handle:
            hashlib.sha256(line[chain.PAYLOAD_OFFSET:-2]).digest()
            count += 1
    raw_seconds = time.perf_counter() - started
    result = verify_bundle(bundle)
    assert result.ok, result.summary()
    print(f"verify bundle    {rate(result.records, result.seconds)}   ({result.summary()})")
    print(f"raw SHA-256      {rate(count, raw_seconds)}   (reading and hashing the same line bytes)")
    print(f"verify / raw     {raw_seconds / result.seconds:>12.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--appends", type=int, default=20_000)
    options = parser.parse_args()
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        raise SystemExit("set DATABASE_URL to a PostgreSQL server (the benchmark makes its own database there)")
    os.environ["DATABASE_URL"] = create_database(url, BENCH_DB)
    os.environ["AUDIT_CHECKPOINT_EVERY_RECORDS"] = "1000"
    with tempfile.TemporaryDirectory(prefix="audit-bench-") as work:
        state_dir = str(Path(work) / "state")
        try:
            setup_django(state_dir)
            from django.db import connection

            with connection.cursor() as cursor:
                cursor.execute("SHOW synchronous_commit")
                print(f"PostgreSQL synchronous_commit={cursor.fetchone()[0]}, CPUs: {os.cpu_count()}")
            if options.appends:
                bench_appends(options.appends, state_dir, os.environ["DATABASE_URL"])
            if options.records:
                bench_export_and_verify(options.records, Path(work))
            connection.close()
        finally:
            drop_database(url, BENCH_DB)


if __name__ == "__main__":
    main()
