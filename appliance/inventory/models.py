"""The appliance and its parts, as the site definition and the discovered facts describe them."""

from django.db import models, transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy

from appliance.audit.tracking import AuditedModel
from appliance.core.fields import EncryptedTextField
from appliance.core.models import TimestampedModel
from appliance.core.roles import can

from .choices import ComponentKind, HealthStatus, NodeRole
from .states import (
    NODE_MACHINE,
    OVERRIDE_CAPABILITY,
    NodeState,
    StateOverrideRefused,
    check_person_transition,
    is_by_hand,
)

# How a state an Administrator declared is shown, wherever the state shows.
SET_BY_HAND = gettext_lazy("set by hand")


class Platform(AuditedModel, TimestampedModel):
    """A server model, described by a file in firmware/platforms/ (the file is the source of truth)."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    file = models.CharField(max_length=255, help_text="path under firmware/platforms/")
    digest = models.CharField(max_length=64, help_text="sha256 of the platform file when imported")
    gpu_model = models.CharField(max_length=100, blank=True)
    gpu_count = models.PositiveSmallIntegerField(default=0)
    gpu_memory_mib = models.PositiveIntegerField(default=0)
    hca_count = models.PositiveSmallIntegerField(default=0)
    spec = models.JSONField(default=dict, help_text="the platform file's content")

    class Meta:
        ordering = ["slug"]

    def __str__(self):
        return self.name


class Appliance(AuditedModel, TimestampedModel):
    name = models.SlugField(max_length=64, unique=True)
    description = models.TextField(blank=True)
    simulated = models.BooleanField(default=False, help_text="nodes are simulated (sysroots, emulated BMCs)")
    site_file = models.CharField(max_length=500, blank=True)
    site_digest = models.CharField(max_length=64, blank=True)
    settings = models.JSONField(default=dict, blank=True, help_text="site-wide settings (fabric, time, ...)")

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class Network(AuditedModel, TimestampedModel):
    class Kind(models.TextChoices):
        IPOIB = "ipoib", "IP over InfiniBand"
        MANAGEMENT = "management", "Management Ethernet"
        BMC = "bmc", "BMC (out of band)"

    appliance = models.ForeignKey(Appliance, on_delete=models.CASCADE, related_name="networks")
    name = models.SlugField(max_length=64)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    cidr = models.CharField(max_length=64)
    pkey = models.CharField(max_length=6, blank=True, help_text="InfiniBand partition key, e.g. 0x7fff")
    mtu = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["appliance", "name"]
        constraints = [models.UniqueConstraint(fields=["appliance", "name"], name="network_unique_name")]

    def __str__(self):
        return f"{self.name} ({self.cidr})"


class Node(AuditedModel, TimestampedModel):
    Role = NodeRole

    appliance = models.ForeignKey(Appliance, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=63, unique=True)
    role = models.CharField(max_length=20, choices=Role.choices)
    platform = models.ForeignKey(Platform, on_delete=models.PROTECT, null=True, blank=True, related_name="nodes")
    # Empty only for a retired node: it gives its address up so that a replacement can take it.
    management_address = models.GenericIPAddressField(unique=True, null=True, blank=True)
    ipoib_addresses = models.JSONField(default=dict, blank=True, help_text="network name -> address")
    labels = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=20, choices=NodeState.choices, default=NodeState.NEW)
    state_changed = models.DateTimeField(default=timezone.now)
    state_reason = models.TextField(blank=True)
    # Set by an Administrator (not proven by a run): who. The reason is state_reason, when state_changed.
    state_by_hand = models.BooleanField(default=False)
    state_set_by = models.CharField(max_length=150, blank=True)
    sysroot = models.CharField(max_length=500, blank=True, help_text="simulated node's root directory; empty on real nodes")
    facts = models.JSONField(default=dict, blank=True, help_text="facts discovered by provisioning")

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def transition(self, target: str, reason: str = "", *, by=None) -> str:
        """Move to `target` if the transition table allows it (raises InvalidTransition otherwise); one audit
        record. A move BY_HAND declares (Ready without a run) needs `by`, a user holding nodes.override_state,
        and a reason; the node then says who set it by hand. Any other move ends "set by hand".
        Returns the state it left."""
        with transaction.atomic():
            current = type(self)._base_manager.select_for_update().only("state").get(pk=self.pk).state
            if by is not None:
                check_person_transition(current, target)
            by_hand = is_by_hand(current, target)
            if by_hand:
                _check_override(by, reason, current, target)
            self.state_by_hand = by_hand
            self.state_set_by = by.get_username() if by_hand else ""
            return NODE_MACHINE.transition(self, target, reason, also=("state_by_hand", "state_set_by"),
                                           details={"by_hand": True, "set_by": self.state_set_by} if by_hand else None)

    @property
    def state_label(self) -> str:
        """The state as people read it: "Ready (set by hand)" when an Administrator declared it."""
        label = NodeState(self.state).label
        return f"{label} ({SET_BY_HAND})" if self.state_by_hand else label


def _check_override(user, reason: str, current: str, target: str) -> None:
    if user is None or not can(user, OVERRIDE_CAPABILITY):
        raise StateOverrideRefused(
            f"node state {current} to {target} without a run is set by hand, which only an Administrator "
            f"({OVERRIDE_CAPABILITY}) may do")
    if not reason.strip():
        raise StateOverrideRefused(f"reason: required to set a node {target} by hand")


class Credential(AuditedModel, TimestampedModel):
    """A login or token that Administrators keep for the appliance, sent only to the endpoints it is bound to.

    A site definition names a credential; it never holds a secret or says where to read one. The
    secret is stored encrypted and is handed to a run only for a BMC whose URL is one of `endpoints`
    (checked when the run's variables are built, whatever the inventory says).
    """

    class Kind(models.TextChoices):
        BMC = "bmc", gettext_lazy("BMC login (Redfish user name and password)")
        # The token the nodes' collectors write the raw points to the site's InfluxDB with.
        INFLUXDB = "influxdb", gettext_lazy("InfluxDB API token")
        # No secret of its own: the endpoints the nodes' collectors may send the ingest tokens the appliance
        # issued them to (a site's telemetry.ingest_url).
        INGEST = "ingest", gettext_lazy("Collector ingest endpoints (the nodes' own tokens)")

    name = models.SlugField(max_length=63, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.BMC)
    description = models.TextField(blank=True)
    username = models.CharField(max_length=100, blank=True)  # a BMC login's only
    # Blank only for a credential carried over from an older inventory without a stored password:
    # such a credential is never handed to a run until an Administrator sets its secret.
    secret = EncryptedTextField(blank=True)
    endpoints = models.JSONField(default=list, blank=True,
                                 help_text="the endpoints (scheme://host:port) the secret may be sent to")
    ca_file = models.CharField(max_length=500, blank=True,
                               help_text="CA bundle that verifies the endpoints' TLS certificates (default: the system's)")

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class BMC(AuditedModel, TimestampedModel):
    """A node's baseboard management controller, reached over Redfish with a named credential."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="bmc")
    url = models.URLField(max_length=300)
    # PROTECT: a credential in use cannot disappear from under the nodes that name it.
    credential = models.ForeignKey(Credential, on_delete=models.PROTECT, related_name="bmcs")
    verify_tls = models.BooleanField(default=True)
    system_id = models.CharField(max_length=100, blank=True, help_text="Redfish ComputerSystem id, discovered")

    class Meta:
        verbose_name = "BMC"

    def __str__(self):
        return f"BMC of {self.node_id and self.node.name}"


class GPU(AuditedModel, TimestampedModel):
    class MigMode(models.TextChoices):
        DISABLED = "disabled", "Disabled"
        ENABLED = "enabled", "Enabled"
        PENDING = "pending", "Pending reset"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64, blank=True)
    model = models.CharField(max_length=100)
    memory_mib = models.PositiveIntegerField()
    pci_bus_id = models.CharField(max_length=32, blank=True)
    mig_capable = models.BooleanField(default=False)
    mig_mode = models.CharField(max_length=10, choices=MigMode.choices, default=MigMode.DISABLED)
    nvlink_peers = models.JSONField(default=list, blank=True, help_text="indexes of GPUs reached over NVLink")

    class Meta:
        ordering = ["node", "index"]
        verbose_name = "GPU"
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="gpu_unique_index")]

    def __str__(self):
        return f"{self.node.name}/gpu{self.index}"


class HCA(AuditedModel, TimestampedModel):
    """A host channel adapter (InfiniBand card)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="hcas")
    device = models.CharField(max_length=32, help_text="RDMA device name, e.g. mlx5_0")
    model = models.CharField(max_length=100, blank=True)
    firmware_version = models.CharField(max_length=50, blank=True)
    node_guid = models.CharField(max_length=32, blank=True)

    class Meta:
        ordering = ["node", "device"]
        verbose_name = "HCA"
        constraints = [models.UniqueConstraint(fields=["node", "device"], name="hca_unique_device")]

    def __str__(self):
        return f"{self.node.name}/{self.device}"


class HCAPort(AuditedModel, TimestampedModel):
    class LinkLayer(models.TextChoices):
        INFINIBAND = "InfiniBand", "InfiniBand"
        ETHERNET = "Ethernet", "Ethernet"

    hca = models.ForeignKey(HCA, on_delete=models.CASCADE, related_name="ports")
    port = models.PositiveSmallIntegerField(default=1)
    guid = models.CharField(max_length=32, blank=True)
    rate_gbps = models.PositiveIntegerField(default=0)
    link_layer = models.CharField(max_length=20, choices=LinkLayer.choices, default=LinkLayer.INFINIBAND)
    state = models.CharField(max_length=20, blank=True, help_text="e.g. Active, Down")
    physical_state = models.CharField(max_length=20, blank=True, help_text="e.g. LinkUp, Polling")
    closest_gpu = models.ForeignKey(GPU, on_delete=models.SET_NULL, null=True, blank=True, related_name="closest_ports")
    counters = models.JSONField(default=dict, blank=True, help_text="error counters last read")

    class Meta:
        ordering = ["hca", "port"]
        verbose_name = "HCA port"
        constraints = [models.UniqueConstraint(fields=["hca", "port"], name="hcaport_unique_port")]

    def __str__(self):
        return f"{self.hca}/{self.port}"


class Switch(AuditedModel, TimestampedModel):
    class Kind(models.TextChoices):
        INFINIBAND = "infiniband", "InfiniBand"
        ETHERNET = "ethernet", "Ethernet"

    appliance = models.ForeignKey(Appliance, on_delete=models.CASCADE, related_name="switches")
    name = models.CharField(max_length=63)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    model = models.CharField(max_length=100, blank=True)
    tier = models.CharField(max_length=20, blank=True, help_text="leaf, spine, ...")
    management_address = models.GenericIPAddressField(null=True, blank=True, unique=True)
    port_count = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["appliance", "name"]
        verbose_name_plural = "switches"
        constraints = [models.UniqueConstraint(fields=["appliance", "name"], name="switch_unique_name")]

    def __str__(self):
        return self.name


class Filesystem(AuditedModel, TimestampedModel):
    class Type(models.TextChoices):
        LUSTRE = "lustre", "Lustre"
        BEEGFS = "beegfs", "BeeGFS"
        NFS_RDMA = "nfs-rdma", "NFS over RDMA"

    appliance = models.ForeignKey(Appliance, on_delete=models.CASCADE, related_name="filesystems")
    name = models.SlugField(max_length=64)
    type = models.CharField(max_length=20, choices=Type.choices)
    servers = models.JSONField(default=list, blank=True, help_text="server names or NIDs")
    source = models.CharField(max_length=300, help_text="what is mounted: Lustre MGS NID:/fsname, NFS export, BeeGFS mgmtd")
    mount_point = models.CharField(max_length=300)
    options = models.JSONField(default=list, blank=True, help_text="mount options")
    tunables = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["appliance", "name"]
        constraints = [
            models.UniqueConstraint(fields=["appliance", "name"], name="filesystem_unique_name"),
            models.UniqueConstraint(fields=["appliance", "mount_point"], name="filesystem_unique_mount"),
        ]

    def __str__(self):
        return f"{self.name} ({self.get_type_display()} at {self.mount_point})"


class Pool(AuditedModel, TimestampedModel):
    class Kind(models.TextChoices):
        TRAINING = "training", gettext_lazy("Training (Slurm, exclusive GPUs)")
        INFERENCE = "inference", gettext_lazy("Inference (Kubernetes, shared GPUs)")

    SCHEDULER = {Kind.TRAINING: "slurm", Kind.INFERENCE: "kubernetes"}
    SHARING = {Kind.TRAINING: "exclusive", Kind.INFERENCE: "shared"}

    appliance = models.ForeignKey(Appliance, on_delete=models.CASCADE, related_name="pools")
    name = models.SlugField(max_length=64)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    nodes = models.ManyToManyField(Node, through="PoolMembership", related_name="pools")
    settings = models.JSONField(default=dict, blank=True, help_text="scheduler settings (partition, time-slicing, ...)")

    class Meta:
        ordering = ["appliance", "name"]
        constraints = [models.UniqueConstraint(fields=["appliance", "name"], name="pool_unique_name")]

    def __str__(self):
        return self.name

    @property
    def scheduler(self) -> str:
        return self.SCHEDULER[self.kind]

    @property
    def sharing(self) -> str:
        return self.SHARING[self.kind]


class PoolMembership(AuditedModel, TimestampedModel):
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="memberships")
    # A node serves one pool: training and inference never share a server.
    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="pool_membership")

    class Meta:
        ordering = ["pool", "node"]

    def __str__(self):
        return f"{self.node} in {self.pool}"


class HealthCheck(AuditedModel, TimestampedModel):
    """The latest verdict of one check on one part of a node (the node itself, a GPU, an HCA port, a
    mount), with the evidence behind it and what measured it.

    A stage writes the rows of the checks it ran and leaves the others alone: an `os` rerun does not
    clear a GPU that acceptance found missing. A node is not Ready while one of its rows is failing.
    """

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="health_checks")
    component_kind = models.CharField(max_length=20, choices=ComponentKind.choices)
    # GPU: its index in the inventory; HCA port: device/port (mlx5_0/1); mount: the mount point; node: "".
    component_id = models.CharField(max_length=300, blank=True)
    component_label = models.CharField(max_length=300, blank=True, help_text="e.g. GPU 5 (0000:9a:00.0)")
    gpu = models.ForeignKey(GPU, on_delete=models.SET_NULL, null=True, blank=True, related_name="health_checks")
    name = models.CharField(max_length=100, help_text="what is checked, e.g. present, xid, acceptance gpu.count")
    status = models.CharField(max_length=10, choices=HealthStatus.choices, default=HealthStatus.UNKNOWN)
    evidence = models.CharField(max_length=300, blank=True, help_text="short and human: GPU 5 (0000:9a:00.0) missing")
    source = models.CharField(max_length=200, blank=True, help_text="what measured it: stage and run, telemetry")
    run_id = models.PositiveIntegerField(null=True, blank=True, help_text="the provisioning run that measured it")
    checked_at = models.DateTimeField(default=timezone.now)

    # A check confirmed again with the same verdict is not a change an auditor needs to read.
    audit_exclude = ("created", "updated", "checked_at", "source", "run_id", "component_label", "gpu")

    class Meta:
        ordering = ["node", "component_kind", "component_id", "name"]
        constraints = [models.UniqueConstraint(fields=["node", "component_kind", "component_id", "name"],
                                               name="healthcheck_unique_check")]
        # A node's failing checks (its page, the run's verdict); every failing check (the Overview).
        indexes = [models.Index(fields=["node", "status"], name="healthcheck_node_status"),
                   models.Index(fields=["status", "component_kind"], name="healthcheck_status_kind")]

    def __str__(self):
        return f"{self.node_id and self.node.name}: {self.component_label or self.component_kind} {self.name}"
