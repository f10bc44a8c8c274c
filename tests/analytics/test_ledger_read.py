"""The ledger's raw column read of a window of rollups (ledger._read): on PostgreSQL each column comes as one
binary value parsed by numpy, on SQLite a row at a time. Both give every value exactly and the same arrays
(NULL float: NaN; NULL throttle_reasons: 0; texts as codes into values whose element 0 is the empty text,
which NULL is too), checked on a probe table with the rollup table's column types but no NOT NULL, so that
the NULLs the schema forbids today are read right as well."""

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from django.db import connection

from appliance.analytics import ledger

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
PROBE = "ledger_read_probe"
STORED = ("node_id", "gpu", "instance", "step", "start", "job", "profile", "util", "sm_active", "fb_used_mib",
          "fb_total_mib", "sm_clock_mhz", "throttle_reasons", "throttled_share", "nvlink_bps")
JOB = 'svc "a", café – 東京'  # a quote, a comma, non-ASCII
BIG = 4611686018427387976  # 2**62 + 0x48: a throttle_reasons mask beyond 32 bits
N = None
# (node_id, gpu, instance, minute, step, job, profile, util, sm_active, fb_used_mib, fb_total_mib, sm_clock_mhz,
#  throttle_reasons, throttled_share, nvlink_bps)
ROWS = [
    (11, 0, -1, 0, 60, JOB, "", 1 / 3, N, 0.1 + 0.2, 81559.0, -1.5, BIG, N, 1.7976931348623157e308),
    (11, 1, -1, 0, 60, "", "", N, N, N, N, N, N, N, N),
    (11, 1, -1, 1, 60, N, N, 0.0, 5e-324, 600.0, 81559.0, 1980.0, 0, 0.25, 0.0),
    (12, 2, 1, 0, 60, "embed", "1g.10gb", 50.0, 0.5, 9216.0, 10240.0, 1410.0, 1, 0.0, N),
    (12, 2, 2, 0, 60, "", "3g.40gb", 0.0, 0.0, 0.0, 40960.0, 1410.0, 0, N, N),
    (12, 2, -1, 1, 60, JOB, "", 20.0, 0.2, 9216.0, 81559.0, 1980.0, 32, 1.0, 5e10),
    # Outside the window [T0, T0 + 2 minutes): before, at its end, an hourly row.
    (11, 0, -1, -1, 60, "before", "", 1.0, 1.0, 1.0, 1.0, 1.0, 1, 1.0, 1.0),
    (11, 0, -1, 2, 60, "after", "", 1.0, 1.0, 1.0, 1.0, 1.0, 1, 1.0, 1.0),
    (11, 0, -1, 0, 3600, "hourly", "", 1.0, 1.0, 1.0, 1.0, 1.0, 1, 1.0, 1.0),
]
E0, E1 = 1767261600, 1767261660  # T0 and T0 + 1 minute in epoch seconds
# The window's rows as read, by (node, gpu, instance, t); NaN written None.
EXPECTED = [
    (11, 0, -1, E0, JOB, "", 0.3333333333333333, N, 0.30000000000000004, 81559.0, -1.5, BIG, N,
     1.7976931348623157e308),
    (11, 1, -1, E0, "", "", N, N, N, N, N, 0, N, N),
    (11, 1, -1, E1, "", "", 0.0, 5e-324, 600.0, 81559.0, 1980.0, 0, 0.25, 0.0),
    (12, 2, -1, E1, JOB, "", 20.0, 0.2, 9216.0, 81559.0, 1980.0, 32, 1.0, 5e10),
    (12, 2, 1, E0, "embed", "1g.10gb", 50.0, 0.5, 9216.0, 10240.0, 1410.0, 1, 0.0, N),
    (12, 2, 2, E0, "", "3g.40gb", 0.0, 0.0, 0.0, 40960.0, 1410.0, 0, N, N),
]


def readers():
    """The read of this backend (binary on PostgreSQL) and the row read, which works on either."""
    return [ledger._read, ledger._read_rows]


@pytest.fixture
def probe(db):
    """A table with the GPU rollup table's columns and types, without its NOT NULLs, holding ROWS."""
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TEMPORARY TABLE {PROBE} AS SELECT {', '.join(STORED)} FROM telemetry_gpurollup "
                       "WHERE 1 = 0")
        for node_id, gpu, instance, minute, step, *rest in ROWS:
            start = connection.ops.adapt_datetimefield_value(T0 + minute * MINUTE)
            cursor.execute(f"INSERT INTO {PROBE} ({', '.join(STORED)}) VALUES ({', '.join(['%s'] * len(STORED))})",
                           [node_id, gpu, instance, step, start, *rest])
    return PROBE  # dropped with the test's transaction


def records(columns: dict) -> list[tuple]:
    """The rows of `_read`'s columns with the texts decoded, NaN as None, in key order."""
    out = []
    for i in range(len(columns["t"])):
        row = []
        for name in ledger.GPU_NAMES:
            if name in ledger.STRINGS:
                row.append(columns[f"{name}_values"][columns[f"{name}_code"][i]])
            else:
                value = columns[name][i].item()
                row.append(None if value != value else value)
        out.append(tuple(row))
    return sorted(out, key=lambda r: (r[0], r[1], r[2], r[3]))


def check_contract(columns: dict, rows: int) -> None:
    numbers = [name for name in ledger.GPU_NAMES if name not in ledger.STRINGS]
    assert set(columns) == set(numbers) | {f"{n}_{part}" for n in ledger.STRINGS for part in ("code", "values")}
    for name in numbers:
        kind = np.int64 if name in ledger.INTEGERS else np.float64
        assert columns[name].dtype == kind and columns[name].shape == (rows,), name
    for name in ledger.STRINGS:
        codes, values = columns[f"{name}_code"], columns[f"{name}_values"]
        assert codes.dtype == np.int64 and codes.shape == (rows,)
        assert values.dtype == object and values[0] == "" and "" not in values[1:].tolist()
        assert len(set(values.tolist())) == len(values)  # one code a text
        assert set(codes.tolist()) <= set(range(len(values)))


@pytest.mark.parametrize("reader", readers(), ids=["backend-read", "row-read"])
def test_the_read_gives_every_value_exactly(probe, reader):
    columns = reader(probe, ledger.GPU_NAMES, T0, T0 + 2 * MINUTE)
    check_contract(columns, len(EXPECTED))
    assert records(columns) == EXPECTED
    # The empty and the NULL text are code 0, whichever row came first.
    assert (columns["job_code"] == 0).sum() == 3 and (columns["profile_code"] == 0).sum() == 4


def test_both_reads_give_the_same_arrays(probe):
    """Row for row (the same scan order on this table), code for code."""
    binary, rows = (read(probe, ledger.GPU_NAMES, T0, T0 + 2 * MINUTE) for read in readers())
    assert binary.keys() == rows.keys()
    for name, array in rows.items():
        if array.dtype == object:
            assert binary[name].tolist() == array.tolist(), name
        else:
            np.testing.assert_array_equal(binary[name], array, err_msg=name, strict=True)


@pytest.mark.parametrize("reader", readers(), ids=["backend-read", "row-read"])
def test_an_empty_window_reads_as_empty_columns(probe, reader):
    columns = reader(probe, ledger.GPU_NAMES, T0 + 5 * MINUTE, T0 + 6 * MINUTE)
    check_contract(columns, 0)
    assert [columns[f"{name}_values"].tolist() for name in sorted(ledger.STRINGS)] == [[""], [""]]


@pytest.mark.postgres
def test_a_null_in_an_integer_column_is_an_error_not_a_shifted_column(probe):
    if connection.vendor != "postgresql":
        pytest.skip("the binary read is PostgreSQL's")
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {probe} SET gpu = NULL WHERE node_id = 12 AND instance = 1")
    with pytest.raises(RuntimeError, match=r"ledger_read_probe\.gpu: 40 bytes for 6 rows"):
        ledger._read(probe, ledger.GPU_NAMES, T0, T0 + 2 * MINUTE)
