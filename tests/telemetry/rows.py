"""Rollup rows written by hand for the tests of what the portal and the API read (queries, API, pages):
the numbers in each test are these rows', written out, never computed by the code under test."""

from datetime import UTC, datetime, timedelta

from django.utils import timezone

from appliance.telemetry.models import (
    MINUTE,
    WHOLE_GPU,
    GpuRollup,
    HardwareEvent,
    JobPlacement,
    NodeCollector,
    NodeRollup,
)

# The tests' clock: half a minute into 12:00, so 11:59 is the newest closed bucket.
NOW = datetime(2026, 3, 2, 12, 0, 30, tzinfo=UTC)


def at(hour: int, minute: int, day: int = 2) -> datetime:
    return datetime(2026, 3, day, hour, minute, tzinfo=UTC)


def gpu_row(node, gpu: int, start: datetime, step: int = MINUTE, instance: int = WHOLE_GPU, **fields) -> GpuRollup:
    return GpuRollup.objects.create(node=node, gpu=gpu, instance=instance, step=step, start=start,
                                    samples=fields.pop("samples", 60), **fields)


def node_row(node, start: datetime, step: int = MINUTE, **fields) -> NodeRollup:
    return NodeRollup.objects.create(node=node, step=step, start=start, samples=fields.pop("samples", 60), **fields)


def collector(node, last_bucket: datetime | None, last_seen: datetime | None = None) -> NodeCollector:
    return NodeCollector.objects.create(node=node, token=f"token-of-{node.name}", token_digest=f"{node.pk:064d}",
                                        issued_at=NOW - timedelta(days=1), last_bucket=last_bucket,
                                        last_seen=last_seen or last_bucket)


def event(node, kind: str, time: datetime, gpu: int | None = None, message: str = "", **fields) -> HardwareEvent:
    return HardwareEvent.objects.create(node=node, kind=kind, time=time, gpu=gpu, message=message, **fields)


def minutes_before(now: datetime, minutes: int) -> datetime:
    """The bucket `minutes` whole minutes before the one `now` is in (1: the newest closed bucket)."""
    return now.replace(second=0, microsecond=0) - timedelta(minutes=minutes)


def sample_telemetry(inventory, now: datetime = NOW):
    """The sample inventory's two GPU nodes at `now` (12:00:30 by default, so "a minute ago" is 11:59):
    gpu-01 reports (GPU 0 busy in job 4242, GPU 1 silent for five minutes), gpu-02 has no collector but
    rows from before (GPU 3 in job 4242 a minute ago)."""
    one, two = inventory.gpu_node, inventory.gpu_node_2
    m1, m2, m5 = (minutes_before(now, m) for m in (1, 2, 5))
    collector(one, m1)
    gpu_row(one, 0, m2, util=40, util_max=60, fb_used_mib=1000, fb_total_mib=81559, power_w=250,
            temp_c=50, job="4242", energy_j=15000)
    gpu_row(one, 0, m1, util=70, util_max=90, fb_used_mib=2000, fb_total_mib=81559, power_w=300,
            temp_c=55, job="4242", energy_j=18000)
    gpu_row(one, 1, m5, util=10, fb_used_mib=500, fb_total_mib=81559, power_w=90)
    gpu_row(two, 3, m1, util=10, fb_used_mib=30000, fb_total_mib=81559, power_w=120, job="4242",
            energy_j=7200)
    node_row(one, m2, gpu_util=40, ib_tx_bps=1e9, ib_rx_bps=5e8, fs_read_bps=2e9, fs_write_bps=1e8,
             cpu_iowait=0.05, mounts={"/mnt/scratch": {"fstype": "lustre", "read_bps": 2e9, "write_bps": 1e8}})
    node_row(one, m1, gpu_util=60, ib_tx_bps=3e9, ib_rx_bps=1e9, fs_read_bps=4e9, fs_write_bps=2e8,
             cpu_iowait=0.25, mounts={"/mnt/scratch": {"fstype": "lustre", "read_bps": 4e9, "write_bps": 2e8}})
    node_row(two, m1, gpu_util=20, ib_tx_bps=1e9, ib_rx_bps=1e9, fs_read_bps=5e8, fs_write_bps=0)
    return one, two


def hgx_gpus(node, count: int = 8) -> list:
    """The GPUs of an HGX H100 board in the node's inventory: the ingest takes GPU lines only for these."""
    from appliance.inventory.models import GPU

    return [GPU.objects.create(node=node, index=index, model="H100-SXM5-80GB", memory_mib=81559, mig_capable=True)
            for index in range(count)]


def place(node, *jobs: str, source: str = "test") -> None:
    """What a scheduler said when asked a moment ago: `jobs` run on `node`, started before any row of the
    tests (the ingest keeps a job id on a row only where a scheduler places it: placements.py)."""
    for job in jobs:
        JobPlacement.objects.create(node=node, source=source, job=job, start=None, end=None, seen_at=timezone.now())
