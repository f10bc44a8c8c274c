"""GPU minute frames: the ingest packs a node's per-minute GPU rows of each minute it writes into one row
(what the analytics ledger reads), from the rows as stored after the write, so a minute sent in parts or
sent again gives the frame of what its rows hold. Numbers written out by hand."""

import hashlib
import math
from datetime import timedelta

import numpy as np
import pytest
from django.test import Client

from appliance.inventory.models import Node
from appliance.telemetry import frames
from appliance.telemetry.models import FleetMinuteFrame, GpuMinuteFrame, GpuRollup, NodeCollector
from tests.sample_inventory import build_sample_inventory
from tests.telemetry.rows import NOW, at, gpu_row, place

pytestmark = pytest.mark.django_db
TOKEN = "tok-frame-gpu01-Qw3Er5Ty7Ui9Op1As2Df4G"
T_1158, T_1159 = 1772452680, 1772452740  # 2026-03-02 11:58 and 11:59 UTC, seconds since 1970


@pytest.fixture
def node():
    node = build_sample_inventory().gpu_node
    NodeCollector.objects.create(node=node, token=TOKEN, issued_at=NOW - timedelta(days=1),
                                 token_digest=hashlib.sha256(TOKEN.encode()).hexdigest())
    place(node, "4242", "4243", "4300")  # where the scheduler runs the tests' jobs
    return node


def write(*lines):
    response = Client().generic("POST", "/telemetry/ingest/api/v2/write?precision=s", "\n".join(lines),
                                HTTP_AUTHORIZATION=f"Token {TOKEN}")
    assert response.status_code == 204, response.content


def gpu_line(gpu: int, t: int, fields: str, tags: str = "") -> str:
    return f"gpu_rollup,Hostname=gpu-01,gpu={gpu}{tags} step=60,samples=60,{fields} {t}"


def frame_of(node, start) -> tuple[int, list[list[float]], list[str], list[str]]:
    frame = GpuMinuteFrame.objects.get(node=node, start=start)
    values = np.frombuffer(bytes(frame.figures), dtype="<f8").reshape(frame.row_count, len(frames.FRAME_COLUMNS))
    return frame.row_count, values.tolist(), frame.jobs.split("\n"), frame.profiles.split("\n")


def same(actual: list[list[float]], expected: list[list[float]]) -> bool:
    """Row for row, NaN where NaN is expected."""
    return len(actual) == len(expected) and all(
        len(a) == len(e) and all((math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, e, strict=True))
        for a, e in zip(actual, expected, strict=True))


NAN = float("nan")


def test_the_ingest_packs_each_minute_of_the_node_it_writes(node):
    # columns: gpu, instance, util, sm_active, fb_used_mib, fb_total_mib, sm_clock_mhz, throttle_reasons,
    # throttled_share, nvlink_bps
    write(gpu_line(1, T_1159, "util=12.5,fb_used_mib=100"),
          gpu_line(0, T_1159, "util=70,sm_active=0.61,fb_used_mib=2000,fb_total_mib=81559,sm_clock_mhz=1980,"
                              "throttle_reasons=4,throttled_share=0.25,nvlink_bps=3e10", ",hpc_job=4242"),
          gpu_line(0, T_1159, "util=5,fb_used_mib=9000", ",GPU_I_ID=1,GPU_I_PROFILE=1g.10gb,hpc_job=4243"),
          gpu_line(0, T_1158, "util=10"))
    count, values, jobs, profiles = frame_of(node, at(11, 59))
    assert count == 3
    assert same(values, [[0, -1, 70, 0.61, 2000, 81559, 1980, 4, 0.25, 3e10],
                         [0, 1, 5, NAN, 9000, NAN, NAN, 0, NAN, NAN],
                         [1, -1, 12.5, NAN, 100, NAN, NAN, 0, NAN, NAN]])
    assert jobs == ["4242", "4243", ""] and profiles == ["", "1g.10gb", ""]
    count, values, jobs, _ = frame_of(node, at(11, 58))
    assert count == 1 and same(values, [[0, -1, 10, NAN, NAN, NAN, NAN, 0, NAN, NAN]]) and jobs == [""]
    assert GpuMinuteFrame.objects.count() == 2


def test_a_minute_sent_in_parts_or_again_is_packed_as_its_rows_now_hold_it(node):
    write(gpu_line(0, T_1159, "util=70", ",hpc_job=4242"))
    write(gpu_line(1, T_1159, "util=30", ",hpc_job=4242"))  # the minute's other GPU, in a later write
    count, values, jobs, _ = frame_of(node, at(11, 59))
    assert count == 2 and [row[:3] for row in values] == [[0, -1, 70], [1, -1, 30]] and jobs == ["4242", "4242"]
    write(gpu_line(0, T_1159, "util=75", ",hpc_job=4300"))  # GPU 0 sent again, with other values and job
    count, values, jobs, _ = frame_of(node, at(11, 59))
    assert count == 2 and [row[:3] for row in values] == [[0, -1, 75], [1, -1, 30]] and jobs == ["4300", "4242"]
    assert GpuMinuteFrame.objects.count() == 1


def test_build_packs_rows_written_another_way_and_drops_a_frame_whose_rows_are_gone(node):
    gpu_row(node, 3, at(11, 0), util=40.0, job="77")
    gpu_row(node, 3, at(11, 1), util=41.0, job="77")
    assert frames.build([at(11, 0), at(11, 1), at(11, 2)]) == 2  # 11:02 has no rows: no frame
    assert frame_of(node, at(11, 1))[1][0][:3] == [3, -1, 41]
    GpuRollup.objects.filter(start=at(11, 1)).delete()
    assert frames.build([at(11, 1)], [node.pk]) == 0
    assert list(GpuMinuteFrame.objects.values_list("start", flat=True)) == [at(11, 0)]


def node_of(node, start) -> tuple[list[float] | None, list[str], list[float]]:
    frame = GpuMinuteFrame.objects.get(node=node, start=start)
    figures = None if frame.node_figures is None else np.frombuffer(bytes(frame.node_figures), dtype="<f8").tolist()
    return figures, frame.mounts.split("\n") if frame.mounts else [], \
        np.frombuffer(bytes(frame.mount_reads), dtype="<f8").tolist()


def test_the_frame_carries_the_node_rows_figures_and_mounts_whichever_write_brought_them(node):
    write(gpu_line(0, T_1159, "util=3", ",hpc_job=4242"))
    assert node_of(node, at(11, 59)) == (None, [], [])  # no node row yet
    # the node row and its mounts in a later write: the frame is written again with them
    write(f"node_rollup,Hostname=gpu-01 step=60,samples=60,cpu_busy=0.35,cpu_iowait=0.12,ib_tx_bps=2e10,"
          f"ib_rx_bps=1.8e10,ib_line_bps=4e11,fs_read_bps=3e9 {T_1159}",
          f"mount_rollup,Hostname=gpu-01,mount=/mnt/scratch,fstype=lustre step=60,read_bps=2.9e9,write_bps=9e7 {T_1159}",
          f"mount_rollup,Hostname=gpu-01,mount=/home,fstype=nfs step=60,write_bps=1e7 {T_1159}")
    # NODE_FRAME_COLUMNS: cpu_iowait, cpu_busy, ib_tx_bps, ib_rx_bps, ib_line_bps, fs_read_bps; mounts by name
    figures, mounts, reads = node_of(node, at(11, 59))
    assert figures == [0.12, 0.35, 2e10, 1.8e10, 4e11, 3e9]
    assert mounts == ["/home", "/mnt/scratch"] and math.isnan(reads[0]) and reads[1] == 2.9e9
    # a node row alone, at a minute without GPU rows: no frame
    write(f"node_rollup,Hostname=gpu-01 step=60,samples=60,cpu_busy=0.5 {T_1158}")
    assert not GpuMinuteFrame.objects.filter(start=at(11, 58)).exists()


def stored_frames() -> list[tuple]:
    return [(f.node_id, int(f.start.timestamp()), f.row_count, bytes(f.figures), f.jobs, f.profiles,
             None if f.node_figures is None else bytes(f.node_figures), f.mounts, bytes(f.mount_reads), f.holders)
            for f in GpuMinuteFrame.objects.order_by("start")]


def test_unpack_gives_columns_and_refuses_a_frame_of_another_shape(node):
    write(gpu_line(0, T_1159, "util=70", ",hpc_job=4242"), gpu_line(1, T_1159, "util=30"),
          gpu_line(0, T_1158, "util=60", ",hpc_job=4242"),
          f"node_rollup,Hostname=gpu-01 step=60,samples=60,cpu_busy=0.35,fs_read_bps=1e9 {T_1159}",
          f"mount_rollup,Hostname=gpu-01,mount=/mnt/scratch,fstype=lustre step=60,read_bps=1e9 {T_1159}")
    found = stored_frames()
    columns = frames.unpack(found)
    assert columns["node_id"].tolist() == [node.pk] * 3
    assert columns["t"].tolist() == [T_1158, T_1159, T_1159]
    assert columns["gpu"].tolist() == [0, 0, 1] and columns["util"].tolist() == [60.0, 70.0, 30.0]
    assert columns["job_values"][columns["job_code"]].tolist() == ["4242", "4242", ""]
    assert columns["job_code"].tolist() == [1, 1, 0]  # code 0 is the empty text
    assert columns["frame"].tolist() == [0, 1, 1]
    assert math.isnan(columns["cpu_busy"][0]) and columns["cpu_busy"][1:].tolist() == [0.35, 0.35]
    assert math.isnan(columns["cpu_iowait"][1])  # not sent
    assert math.isnan(columns["frame_fs_read_bps"][0]) and columns["frame_fs_read_bps"][1] == 1e9
    assert columns["mount_frame"].tolist() == [1] and columns["mount_read_bps"].tolist() == [1e9]
    assert columns["mount_values"][columns["mount_code"]].tolist() == ["/mnt/scratch"]
    node_id, t, rows, figures, jobs, profiles, *rest = found[1]
    with pytest.raises(frames.FrameError, match=r"GPU minute frames: 240 bytes for 4 rows of 10 values"):
        frames.unpack([found[0], (node_id, t, rows + 1, figures, jobs + "\n", profiles + "\n", *rest)])
    with pytest.raises(frames.FrameError, match=r"GPU minute frame 1: 1 lines of text for 2 rows"):
        frames.unpack([found[0], (node_id, t, rows, figures, "4242", profiles, *rest)])
    with pytest.raises(frames.FrameError, match=r"GPU minute frames: 0 mount reads for 1 mounts"):
        frames.unpack([found[0], (node_id, t, rows, figures, jobs, profiles, rest[0], rest[1], b"", rest[3])])
    with pytest.raises(frames.FrameError, match=r"GPU minute frames: 40 bytes of node figures for 1 node rows"):
        frames.unpack([found[0], (node_id, t, rows, figures, jobs, profiles, rest[0][:40], *rest[1:])])


# ---- fleet frames: every node frame of a minute in one row, packed when the minute settles ----------------

def fleet_of(start) -> FleetMinuteFrame:
    return FleetMinuteFrame.objects.get(start=start)


def stored_fleet() -> list[tuple]:
    return [(int(f.start.timestamp()), f.frame_count, f.row_count, bytes(f.node_ids), bytes(f.frame_rows),
             bytes(f.figures), bytes(f.job_codes), f.jobs, bytes(f.profile_codes), f.profiles, bytes(f.node_figures),
             bytes(f.mount_counts), bytes(f.mount_codes), f.mounts, bytes(f.mount_reads), bytes(f.holder_codes),
             f.holders)
            for f in FleetMinuteFrame.objects.order_by("start")]


def test_a_fleet_frame_packs_every_node_frame_of_its_minute_column_by_column(node):
    other = Node.objects.get(name="gpu-02")
    write(gpu_line(1, T_1159, "util=30"), gpu_line(0, T_1159, "util=70,fb_used_mib=2000", ",hpc_job=4242"),
          f"node_rollup,Hostname=gpu-01 step=60,samples=60,cpu_busy=0.35,fs_read_bps=1e9 {T_1159}",
          f"mount_rollup,Hostname=gpu-01,mount=/mnt/scratch,fstype=lustre step=60,read_bps=1e9 {T_1159}",
          f"mount_rollup,Hostname=gpu-01,mount=/home,fstype=nfs step=60,read_bps=2e6 {T_1159}")
    gpu_row(other, 0, at(11, 59), util=5.0, job="chat-7b", profile="")
    frames.build([at(11, 59)], [other.pk])  # the other node's frame, without a node row
    assert frames.build_fleet([at(11, 58), at(11, 59)]) == 1  # 11:58 has no node frame: no fleet frame
    fleet = fleet_of(at(11, 59))
    assert (fleet.frame_count, fleet.row_count) == (2, 3)
    assert np.frombuffer(bytes(fleet.node_ids), dtype="<i8").tolist() == sorted([node.pk, other.pk])
    mine_first = node.pk < other.pk
    assert np.frombuffer(bytes(fleet.frame_rows), dtype="<i4").tolist() == ([2, 1] if mine_first else [1, 2])
    figures = np.frombuffer(bytes(fleet.figures), dtype="<f8").reshape(len(frames.FRAME_COLUMNS), 3)
    # a column after the other: gpu, instance, util, ... of the three rows
    utils = [70.0, 30.0, 5.0] if mine_first else [5.0, 70.0, 30.0]
    assert figures[2].tolist() == utils and figures[1].tolist() == [-1.0, -1.0, -1.0]
    jobs = fleet.jobs.split("\n")
    assert jobs[0] == "" and sorted(jobs) == ["", "4242", "chat-7b"]
    codes = np.frombuffer(bytes(fleet.job_codes), dtype="<i4").tolist()
    assert [jobs[c] for c in codes] == (["4242", "", "chat-7b"] if mine_first else ["chat-7b", "4242", ""])
    node_figures = np.frombuffer(bytes(fleet.node_figures), dtype="<f8").reshape(2, len(frames.NODE_FRAME_COLUMNS))
    mine, theirs = (node_figures[0], node_figures[1]) if mine_first else (node_figures[1], node_figures[0])
    assert mine[1] == 0.35 and mine[5] == 1e9 and np.isnan(theirs).all()  # cpu_busy, fs_read_bps; no node row
    assert np.frombuffer(bytes(fleet.mount_counts), dtype="<i4").tolist() == ([2, 0] if mine_first else [0, 2])
    mounts = fleet.mounts.split("\n")
    assert [mounts[c] for c in np.frombuffer(bytes(fleet.mount_codes), dtype="<i4")] == ["/home", "/mnt/scratch"]
    assert np.frombuffer(bytes(fleet.mount_reads), dtype="<f8").tolist() == [2e6, 1e9]
    # read back, it gives what its node frames give, column for column
    from_fleet, from_nodes = frames.unpack_fleet(stored_fleet()), frames.unpack(
        sorted(stored_frames(), key=lambda frame: frame[0]))
    assert from_fleet.keys() == from_nodes.keys()
    for name, column in from_nodes.items():
        assert np.array_equal(from_fleet[name], column, equal_nan=column.dtype.kind == "f"), name


def test_a_late_write_drops_its_minutes_fleet_frame_and_the_fold_packs_it_again(node):
    from appliance.telemetry import services

    write(gpu_line(0, T_1158, "util=70", ",hpc_job=4242"), gpu_line(0, T_1159, "util=60", ",hpc_job=4242"))
    # 12:02:30: 11:59 has settled (two minutes after it closed)
    assert services.settle_fleet_frames(now=at(12, 2) + timedelta(seconds=30)) == [at(11, 58), at(11, 59)]
    assert services.settle_fleet_frames(now=at(12, 2) + timedelta(seconds=40)) == []  # packed already
    write(gpu_line(0, T_1158, "util=75", ",hpc_job=4242"))  # 11:58 sent again, late
    assert list(FleetMinuteFrame.objects.values_list("start", flat=True)) == [at(11, 59)]
    assert services.settle_fleet_frames(now=at(12, 3) + timedelta(seconds=30)) == [at(11, 58)]
    figures = np.frombuffer(bytes(fleet_of(at(11, 58)).figures), dtype="<f8")
    assert figures[2] == 75.0  # util, as the rows hold it now


def test_unpack_fleet_refuses_a_fleet_frame_of_another_shape(node):
    write(gpu_line(0, T_1159, "util=70", ",hpc_job=4242"), gpu_line(1, T_1159, "util=30"))
    assert frames.build_fleet([at(11, 59)]) == 1
    [stored] = stored_fleet()
    bad = list(stored)
    bad[5] = stored[5][:-8]  # a value short
    with pytest.raises(frames.FrameError, match=r"fleet minute frame 2026-03-02 11:59: 19 figures for 20"):
        frames.unpack_fleet([tuple(bad)])
    bad = list(stored)
    bad[2] = 3  # more rows than its frames hold
    with pytest.raises(frames.FrameError, match=r"11:59: its frames hold 2 rows, not 3"):
        frames.unpack_fleet([tuple(bad)])
    bad = list(stored)
    bad[6] = np.array([0, 5], dtype="<i4").tobytes()  # a job code past the jobs it names
    with pytest.raises(frames.FrameError, match=r"11:59: jobs codes outside their values"):
        frames.unpack_fleet([tuple(bad)])


def test_writers_hold_a_minutes_lock_shared_and_a_fleet_build_alone(node):
    """PostgreSQL: the advisory locks that keep a fleet frame from packing node frames a writer still holds."""
    from django.db import connection, transaction

    if connection.vendor != "postgresql":
        pytest.skip("advisory locks are PostgreSQL's (SQLite runs one writer at a time)")
    minute = T_1159 // 60

    def held() -> list[tuple]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT classid, objid, mode FROM pg_locks WHERE locktype = 'advisory' "
                           "AND pid = pg_backend_pid() ORDER BY mode")
            return cursor.fetchall()

    gpu_row(node, 0, at(11, 59), util=5.0)
    with transaction.atomic():
        frames.build([at(11, 59)], [node.pk])
        assert held() == [(0x4652, minute, "ShareLock")]
    # the test's own transaction keeps what it took until it ends
    frames.build_fleet([at(11, 59)])
    assert held() == [(0x4652, minute, "ExclusiveLock"), (0x4652, minute, "ShareLock")]
