"""A collector's disk buffer: every sweep's points are written here first (InfluxDB line protocol, one row a
sweep, an SQLite file in WAL mode) and leave only when the sink has taken them, so a sink that is down, a
network that drops or a collector that restarts loses nothing.

At least once: a row the sink took is kept `replay_s` seconds more (marked sent, not deleted), because a sink
that answered 204 may still lose what it had not flushed when it crashes (VictoriaMetrics keeps about a
second in memory). After a failure the forwarder calls `replay()` and those rows are sent again; points are
keyed by series and timestamp, so InfluxDB, VictoriaMetrics (with -dedup.minScrapeInterval) and the
appliance's ingest overwrite instead of counting twice.

Bounded: past `max_bytes` the sent rows kept for a replay go first (the oldest; counted as released), then
the oldest raw rows are rolled up into one row of per-minute points (means of gauges, last values of
counters), then the oldest per-minute rows into per-hour ones. Only when everything is already per-hour does
the buffer drop its oldest row, and it counts and logs that (never silently).
Plain Python, no Django: deployed to the nodes with the collector.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path

from .collector import COUNTER_FIELDS

log = logging.getLogger(__name__)
LEVELS = (0, 60, 3600)  # seconds a point of a row stands for: raw, per minute, per hour


class Buffer:
    def __init__(self, path: str | Path, max_bytes: int = 256 * 2**20, roll_fraction: float = 0.1,
                 replay_s: float = 60.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.roll_fraction = roll_fraction
        self.replay_s = replay_s
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS batches (id INTEGER PRIMARY KEY AUTOINCREMENT, created_ns INTEGER,"
                         " level INTEGER, points INTEGER, size INTEGER, body BLOB)")
        self._db.execute("CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER)")
        if "sent_ns" not in {row[1] for row in self._db.execute("PRAGMA table_info(batches)")}:
            # NULL: waiting for the sink; a time: the sink took it then, kept for a replay
            self._db.execute("ALTER TABLE batches ADD COLUMN sent_ns INTEGER")
        self._db.execute("CREATE INDEX IF NOT EXISTS batches_waiting ON batches (id) WHERE sent_ns IS NULL")
        self._db.execute("CREATE INDEX IF NOT EXISTS batches_sent ON batches (sent_ns) WHERE sent_ns IS NOT NULL")
        # rows the sink refused for good (400/403/413): kept for a look, not sent, bounded apart
        self._db.execute("CREATE TABLE IF NOT EXISTS parked (id INTEGER PRIMARY KEY, created_ns INTEGER, parked_ns INTEGER,"
                         " points INTEGER, size INTEGER, reason TEXT, body BLOB)")
        self._bytes = self._db.execute("SELECT COALESCE(SUM(size), 0) FROM batches").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def append(self, body: str, points: int, created_ns: int) -> None:
        data = body.encode()
        with self._lock:
            self._db.execute("INSERT INTO batches (created_ns, level, points, size, body) VALUES (?, 0, ?, ?, ?)",
                             (created_ns, points, len(data), data))
            self._bytes += len(data)
            if self._bytes > self.max_bytes:
                self._enforce_bound()

    def peek(self, max_points: int) -> list[tuple[int, bytes, int]]:
        """The oldest rows, up to about `max_points` points (at least one row): (id, body, points)."""
        out, total = [], 0
        with self._lock:
            for row_id, body, points in self._db.execute(
                    "SELECT id, body, points FROM batches WHERE sent_ns IS NULL ORDER BY id LIMIT 2000"):
                if out and total + points > max_points:
                    break
                out.append((row_id, body, points))
                total += points
        return out

    def ack(self, ids: list[int], now_ns: int | None = None) -> None:
        """The sink took these rows: kept `replay_s` for a replay, then deleted."""
        if not ids:
            return
        now_ns = time.time_ns() if now_ns is None else now_ns
        with self._lock:
            placeholders = ",".join("?" * len(ids))
            self._db.execute(f"UPDATE batches SET sent_ns = ? WHERE id IN ({placeholders})", [now_ns, *ids])
            self._count("sent_rows", len(ids))
            self._forget_sent(now_ns - int(self.replay_s * 1e9))

    def replay(self, now_ns: int | None = None) -> tuple[int, int]:
        """Send again what the sink took in the last `replay_s` (it may have lost it in a crash): those rows
        wait again, in their original order, ahead of newer ones. Returns (rows, points)."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        since = now_ns - int(self.replay_s * 1e9)
        with self._lock:
            self._forget_sent(since)
            rows, points = self._db.execute("SELECT COUNT(*), COALESCE(SUM(points), 0) FROM batches "
                                            "WHERE sent_ns IS NOT NULL").fetchone()
            if rows:
                self._db.execute("UPDATE batches SET sent_ns = NULL WHERE sent_ns IS NOT NULL")
                self._count("replays", 1)
                self._count("replayed_rows", rows)
                self._count("replayed_points", points)
        return rows, points

    def park(self, ids: list[int], reason: str, now_ns: int | None = None) -> None:
        """The sink refused these rows for good: out of the waiting list into `parked` (at most a sixteenth
        of the bound, 1 MiB at least; past it the oldest parked rows are dropped, counted and logged)."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        placeholders = ",".join("?" * len(ids))
        with self._lock:
            moved = self._db.execute(f"SELECT COUNT(*), COALESCE(SUM(points), 0), COALESCE(SUM(size), 0) FROM batches "
                                     f"WHERE id IN ({placeholders})", ids).fetchone()
            self._db.execute("BEGIN")
            self._db.execute(f"INSERT INTO parked (id, created_ns, parked_ns, points, size, reason, body) "
                             f"SELECT id, created_ns, ?, points, size, ?, body FROM batches WHERE id IN ({placeholders})",
                             [now_ns, reason[:1000], *ids])
            self._db.execute(f"DELETE FROM batches WHERE id IN ({placeholders})", ids)
            self._db.execute("COMMIT")
            self._bytes -= moved[2]
            self._count("parked_rows", moved[0])
            self._count("parked_points", moved[1])
            limit = max(2**20, self.max_bytes // 16)
            while (self._db.execute("SELECT COALESCE(SUM(size), 0) FROM parked").fetchone()[0] > limit
                   and self._db.execute("SELECT COUNT(*) FROM parked").fetchone()[0] > 1):
                row_id, points = self._db.execute("SELECT id, points FROM parked ORDER BY parked_ns, id LIMIT 1").fetchone()
                self._db.execute("DELETE FROM parked WHERE id = ?", (row_id,))
                self._count("dropped_rows", 1)
                self._count("dropped_points", points)
                log.error("telemetry buffer %s: too many refused rows parked, dropped the oldest (%d points)",
                          self.path, points)

    def parked(self) -> list[dict]:
        """The rows the sink refused, oldest first: when, why, how many points (not their bodies)."""
        with self._lock:
            return [{"id": row_id, "created_ns": created, "parked_ns": parked, "points": points, "reason": reason}
                    for row_id, created, parked, points, reason in self._db.execute(
                        "SELECT id, created_ns, parked_ns, points, reason FROM parked ORDER BY parked_ns, id")]

    def _forget_sent(self, before_ns: int) -> None:
        size = self._db.execute("SELECT COALESCE(SUM(size), 0) FROM batches WHERE sent_ns < ?",
                                (before_ns,)).fetchone()[0]
        if size:
            self._db.execute("DELETE FROM batches WHERE sent_ns < ?", (before_ns,))
            self._bytes -= size

    def depth(self) -> dict:
        """What waits for the sink (rows, points, the oldest's time), the file's bytes, and the bound's counts."""
        with self._lock:
            rows, points, oldest = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(points), 0), MIN(created_ns) FROM batches WHERE sent_ns IS NULL"
            ).fetchone()
            counters = dict(self._db.execute("SELECT name, value FROM counters"))
        return {"rows": rows, "points": points, "bytes": self._bytes, "oldest_ns": oldest,
                "rolled_up_rows": counters.get("rolled_up_rows", 0), "dropped_rows": counters.get("dropped_rows", 0),
                "dropped_points": counters.get("dropped_points", 0)}

    def delivery(self) -> dict:
        """The at-least-once side: rows kept for a replay now, and how many were sent again, released (sent
        rows deleted before their replay window ended, to keep the bound) or parked (refused by the sink)."""
        with self._lock:
            kept, kept_points = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(points), 0) FROM batches WHERE sent_ns IS NOT NULL").fetchone()
            counters = dict(self._db.execute("SELECT name, value FROM counters"))
        return {"replay_rows": kept, "replay_points": kept_points,
                **{name: counters.get(name, 0) for name in
                   ("sent_rows", "replays", "replayed_rows", "replayed_points", "released_rows", "parked_rows",
                    "parked_points")}}

    # ---- the bound ------------------------------------------------------------------------------------
    def _count(self, name: str, by: int) -> None:
        self._db.execute("INSERT INTO counters (name, value) VALUES (?, ?) "
                         "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value", (name, by))

    def _enforce_bound(self) -> None:
        # rows the sink already took go before any waiting point is rolled up: they only narrow the replay
        if self._bytes > self.max_bytes:
            released, freed = [], 0
            for row_id, size in self._db.execute("SELECT id, size FROM batches WHERE sent_ns IS NOT NULL "
                                                 "ORDER BY sent_ns, id"):
                released.append(row_id)
                freed += size
                if self._bytes - freed <= self.max_bytes:
                    break
            if released:
                self._db.execute(f"DELETE FROM batches WHERE id IN ({','.join('?' * len(released))})", released)
                self._bytes -= freed
                self._count("released_rows", len(released))
        for level in range(len(LEVELS) - 1):
            while self._bytes > self.max_bytes:
                # per-minute lines (the appliance's buffer) gain nothing from a per-minute roll: per hour then
                if not any(self._roll_oldest(level, target) for target in range(level + 1, len(LEVELS))):
                    break
        while self._bytes > self.max_bytes:
            row = self._db.execute("SELECT id, points, size FROM batches ORDER BY id LIMIT 1").fetchone()  # all waiting
            if row is None or self._db.execute("SELECT COUNT(*) FROM batches").fetchone()[0] <= 1:
                return
            self._db.execute("DELETE FROM batches WHERE id = ?", (row[0],))
            self._bytes -= row[2]
            self._count("dropped_rows", 1)
            self._count("dropped_points", row[1])
            log.error("telemetry buffer %s full at per-hour resolution: dropped its oldest %d points", self.path, row[1])

    def _roll_oldest(self, level: int, target: int) -> bool:
        """Roll the oldest rows of `level` (about roll_fraction of the bound, then on to the end of the target
        level's period, so that a rolled row holds whole minutes or hours and no two rolled rows share one)
        into one row of the `target` level. False when that would not make the buffer smaller."""
        budget = max(1, int(self.max_bytes * self.roll_fraction))
        period_ns = LEVELS[target] * 10**9
        rows, size = [], 0
        for row in self._db.execute("SELECT id, body, size, created_ns FROM batches WHERE level = ? AND sent_ns IS NULL"
                                    " ORDER BY id", (level,)):
            if size >= budget and len(rows) >= 2 and _stamp(row[1]) // period_ns != _stamp(rows[-1][1]) // period_ns:
                break
            rows.append(row)
            size += row[2]
        else:  # every waiting row of the level taken: leave the newest period alone while it may still grow
            newest = _stamp(rows[-1][1]) // period_ns if rows else 0
            complete = [row for row in rows if _stamp(row[1]) // period_ns != newest]
            if len(complete) >= 2:
                rows, size = complete, sum(row[2] for row in complete)
        if len(rows) < 2:
            return False
        body, points = rollup([row[1].decode() for row in rows], LEVELS[target])
        data = body.encode()
        if len(data) >= size:  # rows of different periods each: nothing to gain
            return False
        ids = [row[0] for row in rows]
        self._db.execute("BEGIN")
        self._db.execute(f"DELETE FROM batches WHERE id IN ({','.join('?' * len(ids))})", ids)
        # the rolled row keeps the place of the oldest one it replaces, so it is still sent first
        self._db.execute("INSERT INTO batches (id, created_ns, level, points, size, body) "
                         "VALUES (?, ?, ?, ?, ?, ?)", (ids[0], rows[0][3], target, points, len(data), data))
        self._db.execute("COMMIT")
        self._bytes += len(data) - size
        self._count("rolled_up_rows", len(ids))
        log.warning("telemetry buffer %s over %d bytes: rolled %d rows up to %d s points", self.path,
                    self.max_bytes, len(ids), LEVELS[target])
        return True


def _stamp(body: bytes) -> int:
    """The time of a row's first line (a raw row's lines share their sweep's; a rolled row's is its first
    period's start)."""
    end = body.find(b"\n")
    try:
        return int(body[:end if end >= 0 else len(body)].rsplit(b" ", 1)[-1])
    except ValueError:  # no timestamp: the line is kept, it only does not start a period
        return 0


def _split(line: str) -> tuple[str, list[tuple[str, str]], str]:
    """A line's series key, its fields (name, raw value) and timestamp; a string field's quoted value may
    hold spaces, commas and escaped quotes."""
    at, escaped = 0, False
    while at < len(line):  # the key ends at the first unescaped space
        char = line[at]
        if char == " " and not escaped:
            break
        escaped = char == "\\" and not escaped
        at += 1
    key, rest = line[:at], line[at + 1:]
    fields, item, quoted, escaped = [], [], False, False
    for index, char in enumerate(rest):
        if not escaped and char == '"':
            quoted = not quoted
        if not quoted and not escaped and char in ", ":
            name, _, value = "".join(item).partition("=")
            fields.append((name, value))
            item = []
            if char == " ":
                return key, fields, rest[index + 1:].strip()
            continue
        escaped = char == "\\" and not escaped
        item.append(char)
    raise ValueError(f"no timestamp: {line[:80]}")


def rollup(bodies: list[str], period_s: int) -> tuple[str, int]:
    """Line protocol rolled up to one point per series and `period_s`: the mean of a gauge, the last value
    of a counter (COUNTER_FIELDS, by the name before any ':'), at the start of the period. A line with a
    field that is no float (an event's message, a collector's version) is kept as it is."""
    period_ns = period_s * 10**9
    groups: dict[tuple[str, int], dict[str, list[float]]] = {}
    kept, points = [], 0
    for body in bodies:
        for line in body.splitlines():
            if not line:
                continue
            fields = []
            try:
                key, fields, stamp = _split(line)
                bucket = int(stamp) // period_ns * period_ns
                values = [(name, float(value)) for name, value in fields]
            except ValueError:
                kept.append(line)
                points += max(1, len(fields))
                continue
            group = groups.setdefault((key, bucket), {})
            for name, value in values:
                group.setdefault(name, []).append(value)
    lines = []
    for (key, bucket), fields in groups.items():
        values = []
        for name, seen in fields.items():
            value = seen[-1] if name.split(":", 1)[0] in COUNTER_FIELDS else sum(seen) / len(seen)
            values.append(f"{name}={value!r}")
        points += len(values)
        lines.append(f"{key} {','.join(values)} {bucket}")
    return "\n".join(lines + kept) + "\n", points
