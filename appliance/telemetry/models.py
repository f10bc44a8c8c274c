"""What the appliance keeps of its telemetry in its own database: per-minute and per-hour rollups of every
GPU (and MIG instance) and every node, the hardware events the collectors saw, and the state of each node's
collector. The portal and the API read these, never raw points: raw points go to the site's InfluxDB (or
are scraped from /metrics) when a site wants them.

A rollup row is the collector's own aggregate of one bucket (`step` seconds from `start`): means of the
gauges, maxima where a peak matters, rates of the counters over the bucket (bytes/s), counts of events.
The collector computes the per-minute rows; the appliance folds them into per-hour rows (and a node's into
per-5-minute and per-10-minute rows too, what the fleet's charts of an hour or a few hours read, per-6-hour
and per-day rows of the hours, what a large fleet's week and month read, and the fleet's own rows per
bucket, what its totals read) and prunes them by age
(settings.TELEMETRY_RETENTION). A row is keyed by (node, gpu, instance, step, start), so a collector
that sends a bucket again after a lost answer replaces it: nothing counts twice.

Rows are measurements, not changes an actor made: they are not audited one by one (the audit log records
collectors being registered, tokens issued, alerts acknowledged and rollups pruned).
"""

from django.db import models
from django.utils.translation import gettext_lazy as _

from appliance.core.fields import EncryptedTextField
from appliance.inventory.models import Node

MINUTE = 60
FIVE_MINUTES = 300  # node rows only: what the heatmap of a large fleet's hour reads
TEN_MINUTES = 600  # node rows only: what the fleet's charts read for ranges of hours
THIRTY_MINUTES = 1800  # node rows only: what the heatmap of a large fleet's 6 hours reads (a row a cell)
HOUR = 3600
TWO_HOURS = 2 * 3600  # node rows only, folded from the hours: what the heatmap of a large fleet's day reads
SIX_HOURS = 6 * 3600  # node rows only, folded from the hours: what a large fleet's week reads
DAY = 24 * 3600  # node rows only, folded from the hours: what a large fleet's month reads
STEPS = ((MINUTE, _("per minute")), (FIVE_MINUTES, _("per 5 minutes")), (TEN_MINUTES, _("per 10 minutes")),
         (THIRTY_MINUTES, _("per 30 minutes")), (HOUR, _("per hour")), (TWO_HOURS, _("per 2 hours")),
         (SIX_HOURS, _("per 6 hours")), (DAY, _("per day")))
WHOLE_GPU = -1  # `instance` of a row that measures the whole GPU rather than one MIG GPU instance
# What NodeCollector.live_gpus keeps of each GPU's newest whole-GPU minute (a float64 each, in this order):
# the GPU's index, the minute's start (epoch seconds) and its figures. The Overview's live cells.
LIVE_GPU_FIELDS = ("util", "fb_used_mib", "fb_total_mib", "power_w", "temp_c")
LIVE_GPU_COLUMNS = ("gpu", "start", *LIVE_GPU_FIELDS)


class GpuRollup(models.Model):
    """One GPU (or MIG GPU instance) over one bucket."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpu_rollups")
    gpu = models.PositiveSmallIntegerField(help_text="NVML index of the GPU on its node")
    instance = models.SmallIntegerField(default=WHOLE_GPU, help_text="MIG GPU instance id; -1: the whole GPU")
    step = models.PositiveIntegerField(choices=STEPS, default=MINUTE)
    start = models.DateTimeField(help_text="start of the bucket (UTC)")
    samples = models.PositiveIntegerField(default=0, help_text="sweeps the bucket aggregates")
    job = models.CharField(max_length=100, blank=True,
                           help_text="the Slurm job or inference service that held the GPU most of the bucket, "
                                     "as its scheduler placed it (placements.py)")
    unverified_job = models.CharField(
        max_length=100, blank=True, default="", db_default="",
        help_text="the job the node named that its scheduler did not place on it (then `job` is blank)")
    holders = models.TextField(
        blank=True, default="", db_default="",
        help_text='a minute that changed hands: the seconds each job held it ("41:35,chat-7b:20", holders.py), '
                  "the rest nobody's; blank: `job` (or nobody) held all of it")
    unverified_holders = models.TextField(
        blank=True, default="", db_default="", help_text="holders the node named that its scheduler did not place on it")
    uuid = models.CharField(max_length=64, blank=True)
    profile = models.CharField(max_length=32, blank=True, help_text="MIG profile of the instance, e.g. 1g.10gb")

    util = models.FloatField(null=True, help_text="DCGM_FI_DEV_GPU_UTIL mean, %")
    util_max = models.FloatField(null=True)
    sm_active = models.FloatField(null=True, help_text="DCGM_FI_PROF_SM_ACTIVE mean, ratio 0-1")
    tensor_active = models.FloatField(null=True, help_text="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE mean, ratio 0-1")
    dram_active = models.FloatField(null=True, help_text="DCGM_FI_PROF_DRAM_ACTIVE mean, ratio 0-1")
    fb_used_mib = models.FloatField(null=True, help_text="DCGM_FI_DEV_FB_USED mean, MiB")
    fb_used_max_mib = models.FloatField(null=True)
    fb_total_mib = models.FloatField(null=True)
    power_w = models.FloatField(null=True, help_text="DCGM_FI_DEV_POWER_USAGE mean, W")
    power_max_w = models.FloatField(null=True)
    energy_j = models.FloatField(null=True, help_text="energy used in the bucket, J")
    temp_c = models.FloatField(null=True, help_text="DCGM_FI_DEV_GPU_TEMP mean, C")
    temp_max_c = models.FloatField(null=True)
    sm_clock_mhz = models.FloatField(null=True, help_text="DCGM_FI_DEV_SM_CLOCK mean, MHz")
    throttle_reasons = models.BigIntegerField(default=0, help_text="clock event reasons seen in the bucket (OR)")
    throttled_share = models.FloatField(null=True, help_text="share of sweeps slowed by power or thermal reasons")
    pcie_tx_bps = models.FloatField(null=True, help_text="bytes/s")
    pcie_rx_bps = models.FloatField(null=True, help_text="bytes/s")
    nvlink_bps = models.FloatField(null=True, help_text="bytes/s, both directions")
    xid_count = models.PositiveIntegerField(default=0)
    ecc_dbe = models.PositiveIntegerField(default=0, help_text="uncorrectable ECC errors in the bucket")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "gpu", "instance", "step", "start"],
                                               name="telemetry_gpu_rollup_bucket")]
        indexes = [models.Index(fields=["step", "start"], name="telemetry_gpu_step_start"),
                   # a job's rows (its page), whole GPUs or MIG instances: the instance in the index, or
                   # SQLite, without statistics, prefers the fleet's covering index below for a job's
                   # whole-GPU minutes and goes through every row of the range
                   models.Index(fields=["job", "step", "instance", "start"], name="telemetry_gpu_job_instance"),
                   # the jobs of a range, read from the index alone
                   models.Index(fields=["step", "instance", "start", "job", "node", "gpu", "util"],
                                name="telemetry_gpu_fleet_jobs")]
        ordering = ["node", "gpu", "instance", "step", "start"]

    def __str__(self):
        what = f"{self.node_id}/gpu{self.gpu}" + (f"/gi{self.instance}" if self.instance != WHOLE_GPU else "")
        return f"{what} {self.start:%Y-%m-%d %H:%M} ({self.step}s)"


# What a GpuMinuteFrame packs of each per-minute GPU row (a float64 each, in this order; NULL is NaN, a NULL
# throttle_reasons 0): the figures the analytics ledger's rules read.
FRAME_COLUMNS = ("gpu", "instance", "util", "sm_active", "fb_used_mib", "fb_total_mib", "sm_clock_mhz",
                 "throttle_reasons", "throttled_share", "nvlink_bps")
# and of the node's own row of the minute (NULL: it has none), with each mount's read_bps.
NODE_FRAME_COLUMNS = ("cpu_iowait", "cpu_busy", "ib_tx_bps", "ib_rx_bps", "ib_line_bps", "fs_read_bps")


class GpuMinuteFrame(models.Model):
    """Every per-minute GPU row of one node and minute, packed into one row with what the node's own row of
    the minute holds of its CPUs, fabric and mounts (frames.py): what the ledger of analytics reads, 8 GPU
    rows and a node row of an HGX node as one, so that a day of a large fleet is read in seconds. Derived:
    the ingest writes it from the rows of the minute, in the transaction that writes them, and `row_count`
    says how many GPU rows it packs (the ledger reads the rows of a minute whose count differs)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpu_minute_frames")
    start = models.DateTimeField(help_text="start of the minute (UTC)")
    row_count = models.PositiveSmallIntegerField(help_text="GPU rows packed")
    figures = models.BinaryField(help_text="row_count x FRAME_COLUMNS float64, little-endian, by GPU and instance")
    jobs = models.TextField(blank=True, help_text="each row's job, one per line")
    profiles = models.TextField(blank=True, help_text="each row's MIG profile, one per line")
    holders = models.TextField(blank=True, default="", db_default="",
                               help_text="each row's holders, one per line (blank: its job)")
    node_figures = models.BinaryField(null=True, help_text="NODE_FRAME_COLUMNS float64 of the node's row; NULL: none")
    mounts = models.TextField(blank=True, help_text="the node row's mounts, one per line")
    mount_reads = models.BinaryField(default=b"", help_text="each mount's read_bps, float64 (NaN: not sent)")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "start"], name="telemetry_gpu_frame_key")]
        indexes = [models.Index(fields=["start"], name="telemetry_gpu_frame_start")]

    def __str__(self):
        return f"{self.node_id} {self.start:%Y-%m-%d %H:%M} ({self.row_count} GPU rows)"


class FleetMinuteFrame(models.Model):
    """Every GPU minute frame of one minute, the whole fleet's, packed into one row column by column
    (frames.build_fleet): what the ledger of analytics reads of a settled minute, so that an hour of 1,000
    nodes is 60 rows rather than 60,000. Derived from the node frames when the minute settles (the fold),
    and deleted when any of them is written again (a late write): a minute without one is read from its
    node frames. `row_count` says how many GPU rows it packs, checked against the rows like a node frame's.
    Each text column holds its distinct values, one per line, the first the empty text: the rows' codes
    index them."""

    start = models.DateTimeField(unique=True, help_text="start of the minute (UTC)")
    frame_count = models.PositiveIntegerField(help_text="node frames packed")
    row_count = models.PositiveIntegerField(help_text="GPU rows packed")
    node_ids = models.BinaryField(help_text="each node frame's node, int64, ascending")
    frame_rows = models.BinaryField(help_text="each node frame's GPU rows, int32")
    figures = models.BinaryField(help_text="FRAME_COLUMNS x row_count float64, a column after the other")
    job_codes = models.BinaryField(help_text="each row's job, int32, an index into `jobs`")
    jobs = models.TextField(blank=True, help_text="the jobs, one per line; code 0 the empty text")
    profile_codes = models.BinaryField(help_text="each row's MIG profile, int32, an index into `profiles`")
    profiles = models.TextField(blank=True, help_text="the profiles, one per line; code 0 the empty text")
    node_figures = models.BinaryField(help_text="frame_count x NODE_FRAME_COLUMNS float64 (NaN: no node row)")
    mount_counts = models.BinaryField(help_text="each node frame's mounts, int32")
    mount_codes = models.BinaryField(help_text="each mount's name, int32, an index into `mounts`")
    mounts = models.TextField(blank=True, help_text="the mount names, one per line; code 0 the empty text")
    mount_reads = models.BinaryField(help_text="each mount's read_bps, float64 (NaN: not sent)")
    # (rows written without them, by a tool's raw INSERT or before they were kept, hold none)
    holder_codes = models.BinaryField(default=b"", db_default=b"",
                                      help_text="each row's holders, int32, an index into `holders`")
    holders = models.TextField(blank=True, default="", db_default="",
                               help_text="the holders texts, one per line; code 0 the empty text")

    def __str__(self):
        return f"{self.start:%Y-%m-%d %H:%M} ({self.frame_count} node frames, {self.row_count} GPU rows)"


class NodeRollup(models.Model):
    """One node over one bucket: its GPUs together, its fabric ports, filesystems, disks and CPUs."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="rollups")
    step = models.PositiveIntegerField(choices=STEPS, default=MINUTE)
    start = models.DateTimeField()
    samples = models.PositiveIntegerField(default=0)
    gpus = models.PositiveSmallIntegerField(default=0, help_text="GPUs measured (whole GPUs)")
    gpu_util = models.FloatField(null=True, help_text="mean utilization of the node's GPUs, %")
    gpu_util_max = models.FloatField(null=True, help_text="utilization of its busiest GPU, %")
    gpu_fb_used_mib = models.FloatField(null=True, help_text="GPU memory used, summed over its GPUs")
    gpu_power_w = models.FloatField(null=True, help_text="GPU power, summed over its GPUs")
    ib_tx_bps = models.FloatField(null=True, help_text="InfiniBand data transmitted, all ports, bytes/s")
    ib_rx_bps = models.FloatField(null=True)
    ib_line_bps = models.FloatField(null=True, help_text="line rate of its active ports together, bytes/s")
    ib_xmit_wait = models.FloatField(null=True, help_text="port_xmit_wait ticks per second (congestion)")
    ib_errors = models.PositiveIntegerField(default=0, help_text="symbol, receive and link-down errors")
    fs_read_bps = models.FloatField(null=True, help_text="filesystem client reads, all mounts, bytes/s")
    fs_write_bps = models.FloatField(null=True)
    mounts = models.JSONField(default=dict, blank=True,
                              help_text='per mount: {"/mnt/scratch": {"fstype": "lustre", "read_bps": .., "write_bps": ..}}')
    disk_read_bps = models.FloatField(null=True)
    disk_write_bps = models.FloatField(null=True)
    cpu_busy = models.FloatField(null=True, help_text="ratio 0-1")
    cpu_iowait = models.FloatField(null=True, help_text="ratio 0-1")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "step", "start"], name="telemetry_node_rollup_bucket")]
        # (step, start) with the node and its GPUs' utilization: the fleet's heatmap over a range read from
        # the index alone (a third less time than through the table for 1,000 nodes' hour)
        indexes = [models.Index(fields=["step", "start", "node", "gpu_util"], name="telemetry_node_step_start_util"),
                   # the fleet's totals over a range (a seek per node) and a node's own rows, read from the
                   # index alone
                   models.Index(fields=["node", "step", "start", "gpu_util", "gpu_power_w", "ib_tx_bps", "ib_rx_bps",
                                        "fs_read_bps", "fs_write_bps"], name="telemetry_node_fleet")]
        ordering = ["node", "step", "start"]

    def __str__(self):
        return f"{self.node_id} {self.start:%Y-%m-%d %H:%M} ({self.step}s)"


class FleetRollup(models.Model):
    """An appliance's GPU nodes together over one bucket: the sums of their node rows of that step and
    start. The Overview's fleet totals (GPU utilization, power, fabric and filesystem throughput) read one
    of these a bucket instead of aggregating every node's row: an hour of 1,000 nodes is 60 rows, not
    60,000. Folded from the node rows (services.fold_fleet): per-minute rows by the periodic fold once a
    minute has settled, the coarser levels whenever their node rows are folded, again for any bucket a late
    write lands in. The part of a range newer than the newest fleet row is read from the node rows. Each
    row also keeps its bucket's heatmap cells (every node's GPU utilization: node_ids, node_gpu_util), which
    the Overview's heatmap reads instead of the node rows."""

    appliance = models.ForeignKey("inventory.Appliance", on_delete=models.CASCADE, related_name="fleet_rollups")
    step = models.PositiveIntegerField(choices=STEPS, default=MINUTE)
    start = models.DateTimeField()
    nodes = models.PositiveIntegerField(default=0, help_text="node rows summed (nodes with GPUs that reported)")
    gpu_util_sum = models.FloatField(null=True, help_text="sum of the nodes' mean GPU utilization, %")
    gpu_util_count = models.PositiveIntegerField(default=0, help_text="node rows with a GPU utilization")
    gpu_power_w = models.FloatField(null=True, help_text="GPU power of every node, summed")
    ib_tx_bps = models.FloatField(null=True, help_text="InfiniBand transmitted, every node, bytes/s")
    ib_rx_bps = models.FloatField(null=True)
    fs_read_bps = models.FloatField(null=True, help_text="filesystem client reads, every node, bytes/s")
    fs_write_bps = models.FloatField(null=True)
    # The bucket's heatmap cells: each node row's GPU utilization, in two arrays of the same length (the
    # Overview reads a bucket of 1,000 nodes as one row instead of 1,000). None where the fold that made the
    # row predates them: the heatmap then reads that bucket's node rows.
    node_ids = models.BinaryField(null=True, editable=False,
                                  help_text="the nodes summed, ascending: int64 each, little-endian")
    node_gpu_util = models.BinaryField(null=True, editable=False,
                                       help_text="those nodes' mean GPU utilization, %, in the same order: float64 "
                                                 "each, little-endian, NaN where a node row has none")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["appliance", "step", "start"], name="telemetry_fleet_rollup_bucket")]
        # Covering the totals (the Overview reads a day of minutes from the index alone, not from rows made
        # long by their heatmap cells).
        indexes = [models.Index(fields=["step", "start", "appliance", "gpu_util_sum", "gpu_util_count", "gpu_power_w",
                                        "ib_tx_bps", "ib_rx_bps", "fs_read_bps", "fs_write_bps"],
                                name="telemetry_fleet_totals")]
        ordering = ["appliance", "step", "start"]

    def __str__(self):
        return f"{self.appliance_id} fleet {self.start:%Y-%m-%d %H:%M} ({self.step}s)"


class HardwareEvent(models.Model):
    """Something a collector saw happen: an XID, uncorrectable ECC errors, a port going down, a GPU
    starting to throttle, NVML failing on a GPU. Kept as the collector reported it; an alert until a person
    acknowledges it."""

    class Kind(models.TextChoices):
        XID = "xid", _("XID error")
        ECC = "ecc", _("uncorrectable ECC")
        LINK_DOWN = "link_down", _("link down")
        THROTTLING = "throttling", _("throttling")
        NVML_ERROR = "nvml_error", _("NVML error")
        COLLECTOR = "collector", _("collector")

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="hardware_events")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    gpu = models.PositiveSmallIntegerField(null=True, blank=True)
    device = models.CharField(max_length=64, blank=True, help_text="HCA and port, e.g. mlx5_0/1")
    time = models.DateTimeField()
    message = models.TextField(blank=True)
    detail = models.JSONField(default=dict, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.CharField(max_length=150, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "kind", "gpu", "device", "time"],
                                               name="telemetry_event_once")]
        indexes = [models.Index(fields=["time"], name="telemetry_event_time"),
                   models.Index(fields=["acknowledged_at", "time"], name="telemetry_event_open")]
        ordering = ["-time"]

    def __str__(self):
        return f"{self.node_id} {self.kind} {self.time:%Y-%m-%d %H:%M:%S}"


class JobPlacement(models.Model):
    """A job (a Slurm job id, an inference service) that a scheduler put on a node, as the scheduler said when
    asked (placements.py): what a job id a node's collector names is checked against. `end` is blank while
    the job ran when last seen (`seen_at`)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="job_placements")
    source = models.CharField(max_length=40, help_text="the provider that reported it (slurm, deployments, ...)")
    job = models.CharField(max_length=100)
    start = models.DateTimeField(null=True, blank=True, help_text="when it started on the node; blank: not said")
    end = models.DateTimeField(null=True, blank=True, help_text="when it ended; blank: running when last seen")
    seen_at = models.DateTimeField(help_text="when the scheduler last reported it")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "source", "job"], name="telemetry_job_placement_once")]
        indexes = [models.Index(fields=["node", "job"], name="telemetry_job_placement_node"),
                   models.Index(fields=["end"], name="telemetry_job_placement_end")]

    def __str__(self):
        return f"{self.job} on {self.node_id} ({self.source})"


class NodeCollector(models.Model):
    """The collector of one node as the appliance knows it: the token it writes with (issued once by the
    monitoring stage and rendered to that node only; a write is checked against its digest and may only
    carry that node's series), and what its last report said."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="collector")
    token = EncryptedTextField(help_text="the node's ingest token (encrypted at rest; rendered to the node only)")
    token_digest = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the token, what a write is checked by")
    issued_at = models.DateTimeField()
    interval_s = models.FloatField(default=1.0)
    last_seen = models.DateTimeField(null=True, blank=True, help_text="when it last wrote")
    last_bucket = models.DateTimeField(null=True, blank=True, help_text="the newest bucket it sent")
    last_sweep = models.DateTimeField(null=True, blank=True, help_text="its newest sweep, as it reported")
    buffer_rows = models.BigIntegerField(default=0)
    buffer_points = models.BigIntegerField(default=0)
    dropped_points = models.BigIntegerField(default=0, help_text="points its buffer had to drop (never silently)")
    sweeps = models.BigIntegerField(default=0)
    sweep_errors = models.BigIntegerField(default=0)
    sink_error = models.TextField(blank=True, help_text="the last error of its InfluxDB sink, if any")
    version = models.CharField(max_length=40, blank=True)
    # Each GPU's newest whole-GPU minute, kept by the ingest in the transaction that stores it: the Overview
    # reads a node's live cells here, 1,000 short values for 1,000 nodes instead of 8,000 rollup rows.
    live_gpus = models.BinaryField(
        null=True, editable=False,
        help_text="a row a GPU, by index: LIVE_GPU_COLUMNS as float64, little-endian (NaN: no value)")
    live_gpu_jobs = models.TextField(blank=True, default="", editable=False,
                                     help_text="the job of each of those GPUs, in the same order, one a line")

    def __str__(self):
        return f"collector of {self.node_id}"
