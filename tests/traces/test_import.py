"""Traces from elsewhere: small CSV, Parquet, .gz and .tar.gz files written here, imported through the
command and the service, and the report's figures worked out by hand beside each file."""

import gzip
import io
import json
import tarfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.management import CommandError, call_command

from appliance.audit.models import AuditRecord
from appliance.traces.models import Sample, Trace
from appliance.traces.services import TraceError, import_trace, source_report

pytestmark = pytest.mark.django_db

# Three GPUs, two minutes, relative seconds, fractions. In percent: g1 0, 50; g2 0, 0; g3 100, 25.
# Sorted: 0 0 0 25 50 100. Mean 175 / 6 = 29.1667. p50 at position 2.5: 0 + (25 - 0) x 0.5 = 12.5;
# p90 at 4.5: 50 + (100 - 50) x 0.5 = 75. Zeros 3 of 6. At 0% in more than half their samples: g2 only
# (g1 is at 0% in exactly half), 1 of 3 entities. Memory given 5 times: (100 + 200 + 0 + 0 + 10) / 5 = 62.
FRACTIONS = ("ts,gpu,util,mem,job\n"
             "0,g1,0,100,j1\n60,g1,0.5,200,j1\n0,g2,0,0,\n60,g2,0,0,\n0,g3,1,10,j2\n60,g3,0.25,,j2\n")


def write(path, text: str):
    path.write_text(text)
    return path


def audit(event: str):
    return list(AuditRecord.objects.filter(event=event).order_by("sequence"))


def test_a_csv_of_fractions_and_relative_seconds_through_the_command(tmp_path):
    out = io.StringIO()
    call_command("telemetry", "import", str(write(tmp_path / "alibaba.csv", FRACTIONS)), "--name", "alibaba",
                 "--value", "util", "--time", "ts", "--entity", "gpu", "--memory", "mem", "--job", "job", stdout=out)
    assert out.getvalue().startswith("Imported trace alibaba: 6 row(s) of 3 entities (csv; values read as "
                                     "fraction; time relative, from 0 s, 60 s long)")
    report = source_report("alibaba")
    assert report["utilization"] == {"samples": 6, "zero_share": 0.5, "mean": 29.1667, "p50": 12.5, "p90": 75.0}
    assert report["entities"] == {"count": 3, "idle_majority": 1, "idle_majority_share": 0.3333}
    assert report["memory"] == {"samples": 5, "mean": 62.0}
    assert report["jobs"] == {"count": 2}
    assert report["trace"]["time"] == "relative" and report["trace"]["start"] is None
    printed = io.StringIO()
    call_command("analytics", "report", "--source", "alibaba", "--json", stdout=printed)
    assert json.loads(printed.getvalue())["utilization"] == report["utilization"]
    assert report["trace"]["columns"] == {"value": "util", "time": "ts", "entity": "gpu", "memory": "mem",
                                          "job": "job"}
    assert sorted(Sample.objects.values_list("entity", "offset_s", "value", "memory", "job")) == [
        ("g1", 0.0, 0.0, 100.0, "j1"), ("g1", 60.0, 50.0, 200.0, "j1"), ("g2", 0.0, 0.0, 0.0, ""),
        ("g2", 60.0, 0.0, 0.0, ""), ("g3", 0.0, 100.0, 10.0, "j2"), ("g3", 60.0, 25.0, None, "j2")]
    [record] = audit("traces.trace.import")
    assert record.target_name == "alibaba" and record.details["rows"] == 6 and record.details["scale"] == "fraction"
    assert record.details["file"] == "alibaba.csv" and record.actor_username

    with pytest.raises(CommandError, match="a trace of that name exists .* give --replace"):
        call_command("telemetry", "import", str(tmp_path / "alibaba.csv"), "--name", "alibaba", "--value", "util",
                     "--time", "ts", "--entity", "gpu")
    # Replaced by the first two rows only: the old six are gone, the replacement audited with what it replaced.
    write(tmp_path / "two.csv", "ts,gpu,util\n0,g1,0.2\n30,g1,0.4\n")
    call_command("telemetry", "import", str(tmp_path / "two.csv"), "--name", "alibaba", "--value", "util",
                 "--time", "ts", "--entity", "gpu", "--replace", stdout=io.StringIO())
    assert Sample.objects.count() == 2 and Trace.objects.get().rows == 2
    [replaced] = audit("traces.trace.replace")
    assert replaced.details["replaced"]["rows"] == 6 and replaced.details["rows"] == 2
    assert source_report("alibaba")["utilization"] == {"samples": 2, "zero_share": 0.0, "mean": 30.0, "p50": 30.0,
                                                       "p90": 38.0}


def test_parquet_with_a_timestamp_column_and_percent_values(tmp_path):
    # Two containers over 20 s, percent values 0, 0, 0, 80 / 10, 0, 90, 100: sorted 0 0 0 0 10 80 90 100.
    # Mean 280 / 8 = 35; p50 at 3.5: 0 + 10 x 0.5 = 5; p90 at 6.3: 90 + 10 x 0.3 = 93. Zeros 4 of 8.
    # c1 is at 0% in 3 of 4 samples (majority), c2 in 1 of 4: idle majority 1 of 2.
    stamps = pa.array([1_700_000_000 + step for step in (0, 10, 20, 20, 0, 10, 20, 20)], pa.timestamp("s", "UTC"))
    table = pa.table({"when": stamps, "container": ["c1"] * 4 + ["c2"] * 4,
                      "busy": pa.array([0, 0, 0, 80, 10, 0, 90, 100], pa.int64())})
    pq.write_table(table, tmp_path / "philly.parquet")
    trace = import_trace(tmp_path / "philly.parquet", name="philly", value="busy", time="when", entity="container",
                         format="parquet")
    assert (trace.format, trace.scale, trace.time_kind, trace.rows, trace.entities) == ("parquet", "percent",
                                                                                         "absolute", 8, 2)
    assert trace.started_at.isoformat() == "2023-11-14T22:13:20+00:00" and trace.duration_s == 20.0
    report = source_report("philly")
    assert report["utilization"] == {"samples": 8, "zero_share": 0.5, "mean": 35.0, "p50": 5.0, "p90": 93.0}
    assert report["entities"] == {"count": 2, "idle_majority": 1, "idle_majority_share": 0.5}
    assert "memory" not in report and "jobs" not in report


def test_a_gzipped_csv_with_iso_times_and_a_tar_gz_holding_one_csv(tmp_path):
    # ISO 8601 with "Z", with an offset and without one (UTC): the same instant twice, then 90 s later.
    text = ("time,node_gpu,pct\n2026-03-01T10:00:00Z,n1/0,40\n2026-03-01T12:00:00+02:00,n1/1,0\n"
            "2026-03-01 10:01:30,n1/0,60\n")
    (tmp_path / "site.csv.gz").write_bytes(gzip.compress(text.encode()))
    trace = import_trace(tmp_path / "site.csv.gz", name="site", value="pct", time="time", entity="node_gpu")
    assert (trace.compression, trace.format, trace.time_kind, trace.scale) == ("gzip", "csv", "absolute", "percent")
    assert trace.started_at.isoformat() == "2026-03-01T10:00:00+00:00" and trace.duration_s == 90.0
    assert source_report("site")["utilization"] == {"samples": 3, "zero_share": 0.3333, "mean": 33.3333,
                                                    "p50": 40.0, "p90": 56.0}

    # Epoch seconds in a .tar.gz, the CSV in a folder (folders are passed over).
    archive = tmp_path / "export.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        folder = tarfile.TarInfo("export")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        add_file(tar, "export/samples.csv", b"t,id,u\n1767225600,a,0.5\n1767225660,a,0\n1767225600,b,0\n")
    trace = import_trace(archive, name="export", value="u", time="t", entity="id")
    assert (trace.compression, trace.time_kind, trace.scale, trace.rows) == ("tar.gz", "absolute", "fraction", 3)
    assert trace.started_at.isoformat() == "2026-01-01T00:00:00+00:00"
    assert source_report("export")["entities"] == {"count": 2, "idle_majority": 1, "idle_majority_share": 0.5}


def test_a_byte_order_mark_windows_line_ends_and_fractional_seconds(tmp_path):
    # Arrow reads these times as a timestamp column itself (nanoseconds, UTC).
    (tmp_path / "excel.csv").write_bytes(b"\xef\xbb\xbfts,gpu,util\r\n2026-01-01T00:00:00Z,g1,0.5\r\n"
                                         b"2026-01-01T00:01:00.5Z,g1,0.1\r\n")
    trace = import_trace(tmp_path / "excel.csv", name="excel", value="util", time="ts", entity="gpu")
    assert (trace.time_kind, trace.duration_s, trace.scale) == ("absolute", 60.5, "fraction")
    assert trace.started_at.isoformat() == "2026-01-01T00:00:00+00:00"
    assert source_report("excel")["utilization"]["mean"] == 30.0


def add_file(tar, name: str, data: bytes):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize(("text", "options", "message"), [
    ("ts,gpu,util\n0,g1,0.5\n60,g1,abc\n", {}, "row 2, --value column 'util': 'abc' is not a number"),
    ("ts,gpu,util\n0,g1,50\n60,g1,150\n", {}, "row 2, --value column 'util': 150 is above 100"),
    ("ts,gpu,util\n0,g1,50\n60,g1,-3\n", {}, "row 2, --value column 'util': -3 is below 0"),
    ("ts,gpu,util\n0,g1,50\n60,g1,\n", {}, "row 2, --value column 'util': empty"),
    ("ts,gpu,util\n0,g1,1\n60,g1,0\n", {}, "--value column 'util' holds only 0 and 1: .* --scale"),
    ("ts,gpu,util\n0,g1,0.5\n60,g1,50\n", {"scale": "fraction"}, "row 2, .*50 is above 1, yet --scale fraction"),
    ("ts,gpu,util\n0,g1,0.5\n60,,0.1\n", {}, "row 2, --entity column 'gpu': empty"),
    ("ts,gpu,util\n1767225600,g1,0.5\n60,g1,0.1\n", {}, "row 2, --time column 'ts': the column mixes epoch"),
    ("ts,gpu,util\n1767225600000,g1,0.5\n", {}, "row 1, --time column 'ts': .* past the year 3000"),
    ("ts,gpu,util\n2026-01-01T00:00:00Z,g1,0.5\nyesterday,g1,0.1\n", {}, "row 2, --time column 'ts': 'yesterday' "
     "is neither an ISO 8601 time"),
    ("ts,gpu,util\n5,g1,0.5\n-1,g1,0.1\n", {}, "row 2, --time column 'ts': -1: .* cannot be negative"),
    ("ts,gpu,utilization\n0,g1,0.5\n", {}, "--value 'util': bad.csv has no such column \\(it has 'ts', 'gpu', "
     "'utilization'\\)"),
    ("ts,gpu,util\n", {}, "bad.csv: no rows"),
    ("ts,gpu,util\n0,g1,0.5,7\n", {}, "bad.csv: not readable as CSV"),
    ("ts,gpu,util\n0,g1,0.5\n", {"format": "parquet"}, "bad.csv: not a Parquet file"),
    ("ts,gpu,util\n0,g1,0.5\n", {"name": "../etc"}, "--name '../etc': expected 1 to 64 letters"),
    ("ts,gpu,util\n0,g1,0.5\n", {"name": "kept\n"}, "--name 'kept\\\\n': expected 1 to 64 letters"),
])
def test_bad_input_is_one_error_naming_the_column_and_row_and_leaves_the_old_trace_whole(tmp_path, text, options,
                                                                                            message):
    import_trace(write(tmp_path / "good.csv", FRACTIONS), name="kept", value="util", time="ts", entity="gpu")
    options = {"name": "kept", "value": "util", "time": "ts", "entity": "gpu", "replace": True} | options
    with pytest.raises(TraceError, match=message):
        import_trace(write(tmp_path / "bad.csv", text), **options)
    assert list(Trace.objects.values_list("name", "rows")) == [("kept", 6)] and Sample.objects.count() == 6
    assert audit("traces.trace.replace") == []


def test_an_ambiguous_column_is_read_as_the_caller_says(tmp_path):
    trace = import_trace(write(tmp_path / "binary.csv", "ts,gpu,util\n0,g1,1\n60,g1,0\n0,g2,0\n"), name="binary",
                         value="util", time="ts", entity="gpu", scale="percent")
    assert trace.scale == "percent"
    assert source_report("binary")["utilization"] == {"samples": 3, "zero_share": 0.6667, "mean": 0.3333,
                                                      "p50": 0.0, "p90": 0.8}


def test_an_unknown_name_is_one_error_naming_it():
    with pytest.raises(TraceError, match="no imported trace named 'nowhere' \\(imported: none\\)"):
        source_report("nowhere")


@pytest.mark.parametrize(("members", "message"), [
    ([("../../outside.csv", b"ts,gpu,util\n0,g,0.5\n")], "member '../../outside.csv' points outside the archive"),
    ([("/etc/cron.d/x.csv", b"ts,gpu,util\n0,g,0.5\n")], "member '/etc/cron.d/x.csv' points outside"),
    ([("link.csv", "symlink:/etc/passwd")], "member 'link.csv' is a link"),
    ([("hard.csv", "hardlink:/etc/passwd")], "member 'hard.csv' is a link"),
    ([("a.csv", b"ts,gpu,util\n0,g,0.5\n"), ("b.csv", b"ts,gpu,util\n0,g,0.5\n")], "holds more than one file"),
    ([("a.csv", b"ts,gpu,util\n0,g,0.5\n"), ("run.sh", b"#!/bin/sh\n")], "member 'run.sh' is not a CSV"),
    ([("fifo.csv", "fifo:")], "member 'fifo.csv' is not a regular file"),
    ([], "holds no CSV"),
])
def test_a_tar_with_a_way_out_a_link_or_anything_but_one_csv_is_refused(tmp_path, members, message):
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in members:
            if isinstance(data, bytes):
                add_file(tar, name, data)
                continue
            kind, _, target = data.partition(":")
            info = tarfile.TarInfo(name)
            info.type = {"symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE}[kind]
            info.linkname = target
            tar.addfile(info)
        if not members:
            folder = tarfile.TarInfo("empty")
            folder.type = tarfile.DIRTYPE
            tar.addfile(folder)
    with pytest.raises(TraceError, match=f"evil.tar.gz: {message}"):
        import_trace(archive, name="evil", value="util", time="ts", entity="gpu")
    assert not (tmp_path.parent / "outside.csv").exists() and Trace.objects.count() == 0


def test_a_gzip_or_tar_bomb_stops_at_the_bound(tmp_path, settings):
    settings.TRACE_IMPORT_MAX_BYTES = 1 << 20
    bomb = b"ts,gpu,util\n" + b"0,g,0.5\n" * (512 << 10)  # 4 MiB of rows, a few kB compressed
    (tmp_path / "bomb.csv.gz").write_bytes(gzip.compress(bomb, 9))
    assert (tmp_path / "bomb.csv.gz").stat().st_size < 100_000
    with pytest.raises(TraceError, match="bomb.csv.gz: decompresses to more than 1,048,576 bytes"):
        import_trace(tmp_path / "bomb.csv.gz", name="bomb", value="util", time="ts", entity="gpu")
    with tarfile.open(tmp_path / "bomb.tar.gz", "w:gz") as tar:
        add_file(tar, "bomb.csv", bomb)
    with pytest.raises(TraceError, match="bomb.tar.gz: member 'bomb.csv' is larger than 1,048,576 bytes"):
        import_trace(tmp_path / "bomb.tar.gz", name="bomb", value="util", time="ts", entity="gpu")
    settings.TRACE_IMPORT_MAX_ROWS = 5
    with pytest.raises(TraceError, match="big.csv: 6 rows, more than the import's limit of 5"):
        import_trace(write(tmp_path / "big.csv", FRACTIONS), name="big", value="util", time="ts", entity="gpu")
    assert Trace.objects.count() == 0
