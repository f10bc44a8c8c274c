"""Sinks that lose nothing: a collector of a simulated H100 node sweeps into a real VictoriaMetrics (Debian's
victoria-metrics) that is SIGKILLed and restarted, killed and restarted at once, and stopped for seconds,
all during collection; afterwards every sweep's points are in it, once. And the buffer's bound: a sink down
long enough to pass it rolls the oldest points up, and drops only when nothing is left to roll, counted and
logged."""

import logging
import threading
import time

import pytest

from appliance.simulation import nvml
from appliance.telemetry.agent import Agent
from appliance.telemetry.buffer import Buffer
from appliance.telemetry.collector import Collector
from appliance.telemetry.sinks import Forwarder, InfluxSink, LineFormatter
from tests.telemetry.simnode import make_node
from tests.telemetry.vmserver import VictoriaMetrics, free_port

SECOND = 10**9


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    sysroot = tmp_path_factory.mktemp("sinks") / "gpu01"
    make_node(sysroot)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("APPLIANCE_SIM_SYSROOT", str(sysroot))
        yield {"sysroot": sysroot, "library": str(nvml.library_path())}


class Recording:
    """The agent's collector, remembering each sweep's time (in ms, VictoriaMetrics' resolution); `paused`
    holds the next sweep back (the node's collector stalls: nothing new for the forwarder to write)."""

    def __init__(self, collector: Collector):
        self.collector, self.stamps = collector, []
        self.sweep_of_collector = collector.sweep
        self.running, self.held = threading.Event(), threading.Event()
        self.running.set()
        collector.sweep = self.sweep

    def sweep(self):
        if not self.running.is_set():
            self.held.set()  # every earlier sweep is buffered
            self.running.wait()
            self.held.clear()
        sweep = self.sweep_of_collector()
        self.stamps.append(sweep.time_ns // 10**6)
        return sweep


def wait_for(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def exported_utilization(server: VictoriaMetrics, expected: int, timeout: float = 15.0) -> list[dict]:
    """GPU utilization series of gpu01, once VictoriaMetrics has made `expected` samples searchable (it
    flushes the last second's rows in the background) or after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        exported = server.export('DCGM_FI_DEV_GPU_UTIL{Hostname="gpu01"}')
        if sum(len(series["timestamps"]) for series in exported) >= expected or time.monotonic() > deadline:
            return exported
        time.sleep(0.5)


@pytest.mark.slow
def test_victoria_metrics_killed_restarted_and_stopped_during_collection_every_point_arrives_once(node, tmp_path):
    server = VictoriaMetrics(tmp_path / "vm").start()
    buffer = Buffer(tmp_path / "buffer.sqlite", replay_s=60)
    agent = Agent(Collector("gpu01", node["sysroot"], node["library"]), buffer, InfluxSink(server.url)).start()
    agent.forwarder.max_backoff_s = 0.2
    recording = Recording(agent.collector)
    runner = threading.Thread(target=agent.run, args=(0.05,))
    sweeps_now = lambda: len(recording.stamps)  # noqa: E731
    try:
        runner.start()
        wait_for(lambda: sweeps_now() >= 20 and agent.forwarder.sent_points > 0)
        # a crash: what the server had answered 204 for in its last second was not on its disk yet
        server.kill()
        at = sweeps_now()
        wait_for(lambda: sweeps_now() >= at + 20)  # a second of sweeps with the sink down
        assert agent.forwarder.last_error.startswith(server.url)
        server.start()
        at = sweeps_now()
        wait_for(lambda: sweeps_now() >= at + 20 and agent.buffer.depth()["rows"] <= 2)
        # a crash and a restart between two writes: no write fails, the forwarder finds a new connection
        recording.running.clear()
        # the sweep under way when it stalled is buffered, then written: the kill follows that write closely,
        # while the server still holds it in memory
        wait_for(lambda: recording.held.is_set() and agent.buffer.depth()["rows"] == 0, timeout=5)
        failures = agent.forwarder.failures
        server.kill()
        server.start()
        recording.running.set()
        at = sweeps_now()
        wait_for(lambda: sweeps_now() >= at + 20 and agent.buffer.depth()["rows"] <= 2)
        quick_restart_failures = agent.forwarder.failures - failures
        recording.running.clear()  # what the server holds now, before the next outage's replay could mend it
        wait_for(lambda: recording.held.is_set() and agent.buffer.depth()["rows"] == 0, timeout=5)
        so_far = sorted(recording.stamps)
        after_quick_restart = [sorted(series["timestamps"]) for series in exported_utilization(server, 8 * len(so_far))]
        recording.running.set()
        # stopped for some seconds (a clean shutdown: it flushes), then back
        server.stop()
        at = sweeps_now()
        wait_for(lambda: sweeps_now() >= at + 60)
        assert agent.buffer.depth()["rows"] > 30
        server.start()
        at = sweeps_now()
        wait_for(lambda: sweeps_now() >= at + 20)
    finally:
        agent.stopping.set()
        recording.running.set()
        runner.join()
        delivery = buffer.delivery()
        agent.stop(flush_s=20)
        try:
            exported = exported_utilization(server, 8 * len(recording.stamps))
        finally:
            server.stop()
    depth = agent.buffer_depth_at_stop
    assert depth["rows"] == 0 and depth["rolled_up_rows"] == 0 and depth["dropped_points"] == 0
    assert quick_restart_failures == 0  # so only the new connection can have told the forwarder
    assert after_quick_restart == [so_far] * 8
    assert delivery["replays"] == 3 and delivery["replayed_rows"] > 20, delivery
    assert sorted(series["metric"]["gpu"] for series in exported) == ["0", "1", "2", "3", "4", "5", "6", "7"]
    for series in exported:  # every sweep, once: the replays overwrote
        assert len(series["timestamps"]) == len(recording.stamps), series["metric"]["gpu"]
        assert sorted(series["timestamps"]) == sorted(recording.stamps), series["metric"]["gpu"]
    assert len(recording.stamps) > 150


def test_a_replay_sends_again_what_the_sink_took_in_its_window_first(tmp_path):
    buffer = Buffer(tmp_path / "buffer.sqlite", replay_s=60)
    for second in range(4):
        buffer.append(f"gpu,gpu=0 DCGM_FI_DEV_GPU_UTIL={second}.0 {second * SECOND}\n", 1, second * SECOND)
    taken = buffer.peek(2)
    assert [row_id for row_id, _, _ in taken] == [1, 2]
    buffer.ack([1], now_ns=1000 * SECOND)
    buffer.ack([2], now_ns=1050 * SECOND)
    assert buffer.depth()["rows"] == 2 and buffer.delivery()["replay_rows"] == 2
    # at 1100 s the row taken at 1000 s is past the 60 s window: only row 2 goes again, ahead of 3 and 4
    assert buffer.replay(now_ns=1100 * SECOND) == (1, 1)
    assert [body.decode() for _, body, _ in buffer.peek(10)] == [
        "gpu,gpu=0 DCGM_FI_DEV_GPU_UTIL=1.0 1000000000\n", "gpu,gpu=0 DCGM_FI_DEV_GPU_UTIL=2.0 2000000000\n",
        "gpu,gpu=0 DCGM_FI_DEV_GPU_UTIL=3.0 3000000000\n"]
    assert buffer.delivery() == {"replay_rows": 0, "replay_points": 0, "sent_rows": 2, "replays": 1,
                                 "replayed_rows": 1, "replayed_points": 1, "released_rows": 0, "parked_rows": 0,
                                 "parked_points": 0}
    assert buffer.replay(now_ns=1101 * SECOND) == (0, 0)
    buffer.close()


def test_the_bound_releases_rows_kept_for_a_replay_before_rolling_up_waiting_points(tmp_path):
    line = "gpu,gpu=0 DCGM_FI_DEV_GPU_UTIL=50.0 {}\n"
    size = len(line.format(10 * SECOND))
    buffer = Buffer(tmp_path / "buffer.sqlite", max_bytes=size * 4, roll_fraction=0.5)
    for second in range(10, 14):
        buffer.append(line.format(second * SECOND), 1, second * SECOND)
    buffer.ack([1, 2, 3])
    buffer.append(line.format(14 * SECOND), 1, 14 * SECOND)  # one over: a sent row goes, nothing is rolled up
    assert buffer.depth() | {"bytes": 0} == {"rows": 2, "points": 2, "bytes": 0, "oldest_ns": 13 * SECOND,
                                             "rolled_up_rows": 0, "dropped_rows": 0, "dropped_points": 0}
    assert buffer.delivery()["released_rows"] == 1 and buffer.delivery()["replay_rows"] == 2
    buffer.close()


def test_a_sink_down_past_the_bound_rolls_the_oldest_points_up_and_then_sends_every_minute(node, tmp_path, caplog):
    """Twenty minutes of 1 Hz sweeps (real sweeps of the node, stamped a second apart so that they take
    seconds) into a 1 MiB buffer whose sink is down, then the sink comes up on its address."""
    port = free_port()
    buffer = Buffer(tmp_path / "buffer.sqlite", max_bytes=2**20)
    forwarder = Forwarder(buffer, InfluxSink(f"http://127.0.0.1:{port}", timeout_ms=2000))
    formatter = LineFormatter()
    start = (time.time_ns() - 7200 * SECOND) // (3600 * SECOND) * 3600 * SECOND  # an hour's start, hours ago
    stamps = [start + second * SECOND for second in range(1200)]
    with caplog.at_level(logging.WARNING, logger="appliance.telemetry"), \
            Collector("gpu01", node["sysroot"], node["library"]) as collector:
        for stamp in stamps:
            sweep = collector.sweep()
            sweep.time_ns = stamp
            body, points = formatter.format(sweep)
            buffer.append(body, points, stamp)
        with pytest.raises(Exception, match=f"127.0.0.1:{port}"):
            forwarder.drain_once()
    depth = buffer.depth()
    assert depth["bytes"] <= 2**20 and depth["rolled_up_rows"] > 100
    assert depth["dropped_rows"] == depth["dropped_points"] == 0
    assert any(record.getMessage().startswith(f"telemetry buffer {buffer.path} over 1048576 bytes: rolled ")
               and record.getMessage().endswith(" rows up to 60 s points") for record in caplog.records)
    server = VictoriaMetrics(tmp_path / "vm", port=port).start()
    try:
        while forwarder.drain_once():
            pass
        assert buffer.depth()["rows"] == 0
        exported = exported_utilization(server, 1)
        [gpu0] = [series for series in exported if series["metric"]["gpu"] == "0"]
    finally:
        server.stop()
    times = [stamp - start // 10**6 for stamp in sorted(gpu0["timestamps"])]  # ms into the outage
    # nothing lost: the oldest 19 minutes one point each at the minute's start (means; they were rolled up
    # one whole minute at a time), then the last minute: what was rolled of it, and every second the
    # bound still held raw (about 15 sweeps of 14 kB)
    minutes = [index * 60_000 for index in range(20)]
    assert times[:20] == minutes
    raw = times[20:]
    assert len(raw) >= 10 and raw == list(range(raw[0], 1_200_000, 1000)), raw
    buffer.close()


def test_a_buffer_with_nothing_left_to_roll_up_drops_its_oldest_row_and_says_so(tmp_path, caplog):
    line = "gpu,gpu=0 DCGM_FI_DEV_GPU_UTIL=50.0,DCGM_FI_DEV_FB_USED=1024.0 {}\n"
    buffer = Buffer(tmp_path / "buffer.sqlite", max_bytes=len(line.format(3 * 3600 * SECOND)) * 2 + 1)
    with caplog.at_level(logging.ERROR, logger="appliance.telemetry"):
        for hour in range(3, 7):  # a row an hour: nothing two rows of one level could be rolled into
            buffer.append(line.format(hour * 3600 * SECOND), 2, hour * 3600 * SECOND)
    depth = buffer.depth()
    assert (depth["rows"], depth["dropped_rows"], depth["dropped_points"]) == (2, 2, 4)
    assert [body.decode() for _, body, _ in buffer.peek(10)] == [
        "gpu,gpu=0 DCGM_FI_DEV_GPU_UTIL=50.0,DCGM_FI_DEV_FB_USED=1024.0 18000000000000\n",
        "gpu,gpu=0 DCGM_FI_DEV_GPU_UTIL=50.0,DCGM_FI_DEV_FB_USED=1024.0 21600000000000\n"]
    assert [record.getMessage() for record in caplog.records] == [
        f"telemetry buffer {buffer.path} full at per-hour resolution: dropped its oldest 2 points"] * 2
    buffer.close()


@pytest.mark.slow
def test_a_sink_that_closes_idle_connections_at_once_gets_no_replays(tmp_path):
    """A server without keep-alive (VictoriaMetrics closing idle connections after 10 ms here; a WSGI server
    that closes each one) makes every write open a new connection: that is no restart, and the window is
    not sent again, or every write would carry a minute of points with it."""
    server = VictoriaMetrics(tmp_path / "vm", flags=("-http.idleConnTimeout=10ms",)).start()
    buffer = Buffer(tmp_path / "buffer.sqlite")
    forwarder = Forwarder(buffer, InfluxSink(server.url))
    start = (time.time_ns() - 60 * SECOND) // SECOND * SECOND
    try:
        for second in range(20):
            buffer.append(f"gpu,Hostname=gpu01,gpu=0 DCGM_FI_DEV_GPU_UTIL={second}.0 {start + second * SECOND}\n", 1,
                          start + second * SECOND)
            assert forwarder.drain_once() == 1
            time.sleep(0.1)
        delivery = buffer.delivery()
        [series] = exported_utilization(server, 20)
    finally:
        server.stop()
    assert forwarder.sink._connects == 20  # every write found its connection closed
    assert (delivery["replays"], delivery["sent_rows"]) == (0, 20)
    assert series["values"] == [float(second) for second in range(20)]
    buffer.close()


def test_the_appliances_buffer_rolls_its_rollups_up_and_keeps_events_and_collector_lines_as_they_are(tmp_path):
    """The appliance's buffer holds the contract's per-minute lines, with string fields (an event's message
    and detail, the collector's version) that hold spaces, commas and quotes: past the bound the numbers
    are rolled up, the other lines are kept whole, and nothing raises."""
    event = ('event,Hostname=gpu01,kind=xid,gpu=3 message="Xid 79: GPU has fallen off the bus, \\"again\\"",'
             'detail="{\\"xid\\": 79, \\"pci\\": \\"0000:5D:00.0\\"}" 7230500000000')
    collector = 'collector,Hostname=gpu01 sweeps=60.0,sink_error="",version="1.0 (demo)" 7260000000000'
    rows = [f"gpu_rollup,Hostname=gpu01,gpu=0 step=60.0,util={util}.0 {minute * 60 * SECOND}\n"
            for minute, util in ((120, 10), (121, 30))]
    rows.insert(1, event + "\n" + collector + "\n")
    buffer = Buffer(tmp_path / "appliance.sqlite", max_bytes=sum(len(row) for row in rows) - 1, roll_fraction=0.5)
    for index, row in enumerate(rows):
        buffer.append(row, 2 if row.startswith("gpu") else 6, index)
    assert buffer.depth()["rolled_up_rows"] == 3 and buffer.depth()["dropped_rows"] == 0
    [(_, body, points)] = buffer.peek(100)
    assert body.decode().splitlines() == [
        "gpu_rollup,Hostname=gpu01,gpu=0 step=60.0,util=20.0 7200000000000", event, collector]
    assert points == 7
    buffer.close()


@pytest.mark.slow
def test_a_row_the_sink_refuses_for_good_is_parked_and_the_rows_behind_it_still_go(tmp_path, caplog):
    """VictoriaMetrics answers 400 to a line over its 256 KiB limit: sending it again would block the buffer
    forever, so that row is parked (counted, logged, kept apart) and the rows around it are delivered."""
    server = VictoriaMetrics(tmp_path / "vm").start()
    buffer = Buffer(tmp_path / "buffer.sqlite")
    forwarder = Forwarder(buffer, InfluxSink(server.url))
    start = (time.time_ns() - 60 * SECOND) // SECOND * SECOND
    rows = [f"gpu,Hostname=gpu01,gpu=0 DCGM_FI_DEV_GPU_UTIL=1.0 {start}\n",
            f"gpu,Hostname=gpu01,gpu=0,hpc_job={'x' * 300_000} DCGM_FI_DEV_GPU_UTIL=2.0 {start + SECOND}\n",
            f"gpu,Hostname=gpu01,gpu=0 DCGM_FI_DEV_GPU_UTIL=3.0 {start + 2 * SECOND}\n"]
    try:
        for index, row in enumerate(rows):
            buffer.append(row, 1, start + index * SECOND)
        with caplog.at_level(logging.ERROR, logger="appliance.telemetry"):
            assert forwarder.drain_once() == 3
            assert forwarder.drain_once() == 0
        [series] = exported_utilization(server, 2)
    finally:
        server.stop()
    assert series["values"] == [1.0, 3.0]
    assert buffer.depth()["rows"] == 0 and forwarder.sent_points == 2 and forwarder.last_error == ""
    assert (buffer.delivery()["parked_rows"], buffer.delivery()["parked_points"]) == (1, 1)
    [parked] = buffer.parked()
    assert (parked["id"], parked["created_ns"], parked["points"]) == (2, start + SECOND, 1)
    assert parked["reason"].startswith(f"{server.url}: 400")
    assert [record.getMessage().split(": 400")[0] for record in caplog.records] == [
        f"telemetry sink refused 1 points for good, parked in {buffer.path}: {server.url}"]
    buffer.close()
