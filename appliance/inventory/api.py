"""REST API of the inventory: read-only viewsets, node state transitions, site import by upload.

Serializers come in two sizes, NetBox-style: a brief one (id, url, name) used when an object is
nested in another, and a full one for the object's own endpoint. A BMC's password is never a field.
"""

from django.core.validators import RegexValidator
from django.db.models import Count, F, Prefetch
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import mixins, parsers, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.views import APIView

from appliance.core.api import error_response
from appliance.core.roles import can

from . import credentials, filtersets
from .models import (
    BMC,
    GPU,
    HCA,
    Appliance,
    Credential,
    Filesystem,
    HCAPort,
    Network,
    Node,
    Platform,
    Pool,
    PoolMembership,
    Switch,
)
from .states import (
    OVERRIDE_CAPABILITY,
    InvalidTransition,
    NodeState,
    StateOverrideRefused,
    person_transitions,
)


class IdentityURLField(serializers.HyperlinkedIdentityField):
    """An object's URL by its id. The URL is reversed once per view name and response, then completed
    with each id: a page of 50 nodes nests 800 GPUs and ports, and a reverse() for each was a third of
    the response's time."""

    MARKER = 987654321987

    def get_url(self, obj, view_name, request, format):
        if getattr(obj, "pk", None) in (None, ""):
            return None
        return self.url_of(view_name, obj.pk, request, format)

    def url_of(self, view_name: str, pk, request=None, format=None) -> str:
        """The URL of object `pk` on `view_name` (any viewset's detail route taking pk)."""
        request = request if request is not None else self.context.get("request")
        templates = self.context.setdefault("_identity_urls", {}) if isinstance(self.context, dict) else {}
        key = (view_name, format)
        if key not in templates:
            url = self.reverse(view_name, kwargs={self.lookup_url_kwarg: self.MARKER}, request=request, format=format)
            templates[key] = url.split(str(self.MARKER), 1)
        before, after = templates[key]
        return f"{before}{pk}{after}"


# --- brief serializers: what a reference to an object looks like -------------------------------


class BriefApplianceSerializer(serializers.ModelSerializer):
    url = IdentityURLField(view_name="inventory-appliance-detail")

    class Meta:
        model = Appliance
        fields = ["id", "url", "name"]


class BriefPlatformSerializer(serializers.ModelSerializer):
    url = IdentityURLField(view_name="inventory-platform-detail")

    class Meta:
        model = Platform
        fields = ["id", "url", "slug", "name"]


class BriefNodeSerializer(serializers.ModelSerializer):
    url = IdentityURLField(view_name="inventory-node-detail")

    class Meta:
        model = Node
        fields = ["id", "url", "name", "role", "state"]


class BriefGPUSerializer(serializers.ModelSerializer):
    url = IdentityURLField(view_name="inventory-gpu-detail")

    class Meta:
        model = GPU
        fields = ["id", "url", "index", "uuid", "model", "memory_mib", "mig_mode"]


class BriefHCASerializer(serializers.ModelSerializer):
    url = IdentityURLField(view_name="inventory-hca-detail")

    class Meta:
        model = HCA
        fields = ["id", "url", "device"]


class BriefHCAPortSerializer(serializers.ModelSerializer):
    url = IdentityURLField(view_name="inventory-hcaport-detail")
    device = serializers.CharField(source="hca.device", read_only=True)
    # From brief_ports(): the index joined in, not a GPU object per port.
    closest_gpu_index = serializers.IntegerField(read_only=True, allow_null=True)

    class Meta:
        model = HCAPort
        fields = ["id", "url", "device", "port", "rate_gbps", "link_layer", "state", "closest_gpu_index"]


class BriefPoolSerializer(serializers.ModelSerializer):
    url = IdentityURLField(view_name="inventory-pool-detail")

    class Meta:
        model = Pool
        fields = ["id", "url", "name", "kind"]


# --- full serializers --------------------------------------------------------------------------


class ApplianceSerializer(serializers.ModelSerializer):
    url = IdentityURLField(view_name="inventory-appliance-detail")
    node_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Appliance
        fields = ["id", "url", "name", "description", "simulated", "site_file", "site_digest", "settings",
                  "node_count", "created", "updated"]


class PlatformSerializer(serializers.ModelSerializer):
    url = IdentityURLField(view_name="inventory-platform-detail")

    class Meta:
        model = Platform
        fields = ["id", "url", "slug", "name", "file", "digest", "gpu_model", "gpu_count", "gpu_memory_mib",
                  "hca_count", "spec", "created", "updated"]


class BMCSerializer(serializers.ModelSerializer):
    """Where and how to reach a BMC, and the name of its credential (whose secret is never a field)."""

    credential = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = BMC
        fields = ["url", "credential", "verify_tls", "system_id"]


class NodeSerializer(serializers.ModelSerializer):
    url = IdentityURLField(view_name="inventory-node-detail")
    appliance = BriefApplianceSerializer(read_only=True)
    platform = BriefPlatformSerializer(read_only=True, allow_null=True)
    pool = serializers.SerializerMethodField()
    allowed_transitions = serializers.SerializerMethodField()
    bmc = BMCSerializer(read_only=True, allow_null=True)
    gpus = serializers.SerializerMethodField()
    hca_ports = serializers.SerializerMethodField()
    state_label = serializers.CharField(read_only=True, help_text='the state as people read it: "Ready (set by hand)"')

    class Meta:
        model = Node
        fields = ["id", "url", "name", "role", "appliance", "platform", "management_address", "ipoib_addresses",
                  "labels", "state", "state_label", "state_changed", "state_reason", "state_by_hand", "state_set_by",
                  "allowed_transitions", "pool", "sysroot", "bmc", "gpus", "hca_ports", "facts", "created", "updated"]
        extra_kwargs = {
            "state_by_hand": {"help_text": "an Administrator set this state without a run (the reason is "
                                           "state_reason, when is state_changed)"},
            "state_set_by": {"help_text": "who set the state by hand; empty otherwise"},
        }

    @extend_schema_field(BriefPoolSerializer(allow_null=True))
    def get_pool(self, node):
        pool = pool_of(node)
        return BriefPoolSerializer(pool, context=self.context).data if pool is not None else None

    @extend_schema_field(serializers.ListField(child=serializers.ChoiceField(choices=NodeState.choices)))
    def get_allowed_transitions(self, node) -> list[str]:
        return allowed_transitions(node)

    # A node nests 8 GPUs and 8 ports: written as BriefGPUSerializer and BriefHCAPortSerializer write them,
    # without a serializer per object (a page of 50 nodes spent most of its time there).
    @extend_schema_field(BriefGPUSerializer(many=True))
    def get_gpus(self, node):
        url = self.fields["url"].url_of
        return [{"id": g.pk, "url": url("inventory-gpu-detail", g.pk), "index": g.index, "uuid": g.uuid,
                 "model": g.model, "memory_mib": g.memory_mib, "mig_mode": g.mig_mode} for g in node.gpus.all()]

    @extend_schema_field(BriefHCAPortSerializer(many=True))
    def get_hca_ports(self, node):
        url = self.fields["url"].url_of
        return [{"id": p.pk, "url": url("inventory-hcaport-detail", p.pk), "device": hca.device, "port": p.port,
                 "rate_gbps": p.rate_gbps, "link_layer": p.link_layer, "state": p.state,
                 "closest_gpu_index": p.closest_gpu_index}
                for hca in node.hcas.all() for p in hca.ports.all()]


def pool_of(node) -> Pool | None:
    try:
        return node.pool_membership.pool
    except PoolMembership.DoesNotExist:
        return None


def allowed_transitions(node) -> list[str]:
    return [state.value for state in person_transitions(node.state)]


class NodeTransitionSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=NodeState.choices)
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")


class GPUSerializer(serializers.ModelSerializer):
    url = IdentityURLField(view_name="inventory-gpu-detail")
    node = BriefNodeSerializer(read_only=True)

    class Meta:
        model = GPU
        fields = ["id", "url", "node", "index", "uuid", "model", "memory_mib", "pci_bus_id", "mig_capable",
                  "mig_mode", "nvlink_peers", "created", "updated"]


class HCAPortSerializer(serializers.ModelSerializer):
    url = IdentityURLField(view_name="inventory-hcaport-detail")
    node = BriefNodeSerializer(source="hca.node", read_only=True)
    hca = BriefHCASerializer(read_only=True)
    closest_gpu = BriefGPUSerializer(read_only=True, allow_null=True)

    class Meta:
        model = HCAPort
        fields = ["id", "url", "node", "hca", "port", "guid", "rate_gbps", "link_layer", "state", "physical_state",
                  "closest_gpu", "counters", "created", "updated"]


class HCASerializer(serializers.ModelSerializer):
    url = IdentityURLField(view_name="inventory-hca-detail")
    node = BriefNodeSerializer(read_only=True)
    ports = BriefHCAPortSerializer(many=True, read_only=True)

    class Meta:
        model = HCA
        fields = ["id", "url", "node", "device", "model", "firmware_version", "node_guid", "ports",
                  "created", "updated"]


class SwitchSerializer(serializers.ModelSerializer):
    url = IdentityURLField(view_name="inventory-switch-detail")
    appliance = BriefApplianceSerializer(read_only=True)

    class Meta:
        model = Switch
        fields = ["id", "url", "appliance", "name", "kind", "model", "tier", "management_address", "port_count",
                  "created", "updated"]


class NetworkSerializer(serializers.ModelSerializer):
    url = IdentityURLField(view_name="inventory-network-detail")
    appliance = BriefApplianceSerializer(read_only=True)

    class Meta:
        model = Network
        fields = ["id", "url", "appliance", "name", "kind", "cidr", "pkey", "mtu", "created", "updated"]


class FilesystemSerializer(serializers.ModelSerializer):
    url = IdentityURLField(view_name="inventory-filesystem-detail")
    appliance = BriefApplianceSerializer(read_only=True)

    class Meta:
        model = Filesystem
        fields = ["id", "url", "appliance", "name", "type", "servers", "source", "mount_point", "options",
                  "tunables", "created", "updated"]


class PoolSerializer(serializers.ModelSerializer):
    url = IdentityURLField(view_name="inventory-pool-detail")
    appliance = BriefApplianceSerializer(read_only=True)
    scheduler = serializers.CharField(read_only=True)
    sharing = serializers.CharField(read_only=True)
    node_count = serializers.IntegerField(read_only=True)
    nodes_url = serializers.SerializerMethodField(help_text="the pool's nodes, a page at a time")

    class Meta:
        model = Pool
        fields = ["id", "url", "appliance", "name", "kind", "scheduler", "sharing", "settings", "node_count",
                  "nodes_url", "created", "updated"]

    def get_nodes_url(self, pool) -> str:
        url = reverse("inventory-node-list")
        request = self.context.get("request")
        return (request.build_absolute_uri(url) if request is not None else url) + f"?pool_id={pool.pk}"


class PoolDetailSerializer(PoolSerializer):
    nodes = BriefNodeSerializer(many=True, read_only=True)

    class Meta(PoolSerializer.Meta):
        fields = [*PoolSerializer.Meta.fields[:-2], "nodes", "created", "updated"]


# --- viewsets ------------------------------------------------------------------------------------


class InventoryViewSet(viewsets.ReadOnlyModelViewSet):
    capability = "inventory.view"
    write_capability = "inventory.change"


class ApplianceViewSet(InventoryViewSet):
    queryset = Appliance.objects.annotate(node_count=Count("nodes")).order_by("name")
    serializer_class = ApplianceSerializer
    filterset_class = filtersets.ApplianceFilterSet
    search_fields = ["name", "description"]


class PlatformViewSet(InventoryViewSet):
    queryset = Platform.objects.all()
    serializer_class = PlatformSerializer
    filterset_class = filtersets.PlatformFilterSet
    search_fields = ["slug", "name", "gpu_model"]


def brief_ports():
    """Ports as BriefHCAPortSerializer shows them: the closest GPU's index joined in. A forward relation
    is joined, never prefetched: Django 5.2 prefetches it with one OR term per row on SQLite, which
    refuses the statement past 1,000 rows ("Expression tree is too large")."""
    return Prefetch("ports", queryset=HCAPort.objects.annotate(closest_gpu_index=F("closest_gpu__index"))
                    .only("id", "hca_id", "port", "rate_gbps", "link_layer", "state").order_by("port"))


def hcas_with_ports():
    """A node's HCAs with their ports (brief)."""
    return Prefetch("hcas", queryset=HCA.objects.only("id", "node_id", "device").order_by("device")
                    .prefetch_related(brief_ports()))


class NodeViewSet(InventoryViewSet):
    # The BMC's credential for its name only: never its secret (not decrypted for each node of a page).
    queryset = Node.objects.select_related(
        "appliance", "platform", "bmc__credential", "pool_membership__pool",
    ).defer("bmc__credential__secret", "bmc__credential__endpoints").prefetch_related(
        # Only what a node shows of its GPUs (BriefGPUSerializer's fields).
        Prefetch("gpus", queryset=GPU.objects.only("id", "node_id", "index", "uuid", "model", "memory_mib",
                                                   "mig_mode").order_by("index")),
        hcas_with_ports(),
    ).order_by("name")
    serializer_class = NodeSerializer
    filterset_class = filtersets.NodeFilterSet
    search_fields = ["name", "management_address"]
    ordering_fields = ["name", "role", "state", "state_changed"]
    action_capabilities = {"transition": "inventory.change"}

    @extend_schema(
        request=NodeTransitionSerializer,
        responses={200: NodeSerializer, 400: OpenApiResponse(description="unknown state, or no reason for a "
                                                                        "state set by hand"),
                   403: OpenApiResponse(description="a state set by hand (Ready without a run) needs an "
                                                    "Administrator and a reason"),
                   409: OpenApiResponse(description="the transition table does not allow it; "
                                                    "`error.allowed` lists the states that are")},
    )
    @action(detail=True, methods=["post"])
    def transition(self, request, pk=None):
        """Move the node to another provisioning state, if the transition table allows it."""
        node = self.get_object()
        params = NodeTransitionSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        try:
            node.transition(params.validated_data["state"], params.validated_data["reason"], by=request.user)
        except StateOverrideRefused as exc:
            # An Administrator was refused for want of a reason (their input); anyone else for their role.
            if can(request.user, OVERRIDE_CAPABILITY):
                return error_response(400, "invalid", str(exc), request, fields={"reason": [str(exc)]})
            return error_response(403, "set_by_hand_refused", str(exc), request)
        except InvalidTransition as exc:
            node.refresh_from_db(fields=["state"])
            return error_response(409, "invalid_transition", str(exc), request,
                                  current=node.state, allowed=allowed_transitions(node))
        return Response(self.get_serializer(self.get_queryset().get(pk=node.pk)).data)


class GPUViewSet(InventoryViewSet):
    queryset = GPU.objects.select_related("node")
    serializer_class = GPUSerializer
    filterset_class = filtersets.GPUFilterSet
    search_fields = ["uuid", "node__name", "model"]


class HCAViewSet(InventoryViewSet):
    queryset = HCA.objects.select_related("node").prefetch_related(brief_ports())
    serializer_class = HCASerializer
    filterset_class = filtersets.HCAFilterSet
    search_fields = ["device", "node__name", "node_guid"]


class HCAPortViewSet(InventoryViewSet):
    queryset = HCAPort.objects.select_related("hca__node", "closest_gpu")
    serializer_class = HCAPortSerializer
    filterset_class = filtersets.HCAPortFilterSet
    search_fields = ["guid", "hca__device", "hca__node__name"]


class SwitchViewSet(InventoryViewSet):
    queryset = Switch.objects.select_related("appliance")
    serializer_class = SwitchSerializer
    filterset_class = filtersets.SwitchFilterSet
    search_fields = ["name", "model"]


class NetworkViewSet(InventoryViewSet):
    queryset = Network.objects.select_related("appliance")
    serializer_class = NetworkSerializer
    filterset_class = filtersets.NetworkFilterSet
    search_fields = ["name", "cidr"]


class FilesystemViewSet(InventoryViewSet):
    queryset = Filesystem.objects.select_related("appliance")
    serializer_class = FilesystemSerializer
    filterset_class = filtersets.FilesystemFilterSet
    search_fields = ["name", "source", "mount_point"]


class PoolViewSet(InventoryViewSet):
    """Pools with their node counts; a pool's own page lists its nodes (the node list filters by pool too:
    /api/v1/inventory/nodes/?pool_id=ID, a page at a time)."""

    queryset = Pool.objects.select_related("appliance").annotate(node_count=Count("memberships")).order_by(
        "appliance__name", "name")
    serializer_class = PoolSerializer

    def get_serializer_class(self):
        return PoolDetailSerializer if self.action == "retrieve" else PoolSerializer

    def get_queryset(self):
        queryset = super().get_queryset()
        if self.action == "retrieve":
            queryset = queryset.prefetch_related(Prefetch("nodes", queryset=Node.objects.order_by("name")))
        return queryset
    filterset_class = filtersets.PoolFilterSet
    search_fields = ["name"]


# --- credentials (Administrators only; the secret is write-only) ---------------------------------


class CredentialSerializer(serializers.ModelSerializer):
    """A BMC login, an InfluxDB token or a collector ingest allow-list (`kind`, set on create). `secret` is accepted
    on create and update and never returned."""

    secret = serializers.CharField(write_only=True, required=False, trim_whitespace=False,
                                   style={"input_type": "password"}, help_text="write-only; required on create")
    secret_set = serializers.SerializerMethodField()
    endpoints = serializers.ListField(child=serializers.CharField(max_length=300), required=False, max_length=256,
                                      help_text="BMC endpoints it may be sent to: https://host[:port] (normalized)")
    used_by = serializers.SerializerMethodField()

    class Meta:
        model = Credential
        fields = ["name", "kind", "username", "secret", "secret_set", "description", "endpoints", "ca_file",
                  "used_by", "created", "updated"]
        read_only_fields = ["created", "updated"]
        # A user name: something besides white space, no ':' or control character (credentials.check_username).
        extra_kwargs = {"name": {"validators": []}, "username": {
            "required": False, "allow_blank": False,
            "validators": [RegexValidator(r"^[^\x00-\x1f\x7f:]*[^\s\x00-\x1f\x7f:][^\x00-\x1f\x7f:]*$")]}}

    def get_secret_set(self, credential) -> bool:
        return bool(credential.secret)

    def get_used_by(self, credential) -> list[str]:
        return sorted(credential.bmcs.values_list("node__name", flat=True))


def _credential_error(exc: credentials.CredentialError) -> serializers.ValidationError:
    return serializers.ValidationError({exc.field or "non_field_errors": [str(exc)]})


class CredentialViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                        mixins.UpdateModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """BMC credentials, by name. Only Administrators see or change them; no response holds a secret."""

    capability = write_capability = "credentials.manage"
    queryset = Credential.objects.order_by("name")
    serializer_class = CredentialSerializer
    lookup_field = "name"
    search_fields = ["name", "description"]

    def perform_create(self, serializer):
        data = serializer.validated_data
        kind = data.get("kind", Credential.Kind.BMC)
        needed = {Credential.Kind.BMC: ("name", "username", "secret"), Credential.Kind.INFLUXDB: ("name", "secret")}
        missing = {key: ["this field is required"] for key in needed.get(kind, ("name",)) if not data.get(key)}
        if missing:
            raise serializers.ValidationError(missing)
        try:
            serializer.instance = credentials.create(
                data["name"], kind=kind, username=data.get("username", ""), secret=data.get("secret", ""),
                endpoints=data.get("endpoints", []), description=data.get("description", ""),
                ca_file=data.get("ca_file", ""))
        except credentials.CredentialError as exc:
            raise _credential_error(exc) from None

    def perform_update(self, serializer):
        data = serializer.validated_data
        if "name" in data and data["name"] != serializer.instance.name:
            raise serializers.ValidationError({"name": ["a credential is not renamed: create another one"]})
        if "kind" in data and data["kind"] != serializer.instance.kind:
            raise serializers.ValidationError({"kind": ["a credential keeps its kind: create another one"]})
        try:
            serializer.instance = credentials.update(
                serializer.instance.name, username=data.get("username"), secret=data.get("secret"),
                description=data.get("description"), ca_file=data.get("ca_file"), endpoints=data.get("endpoints"))
        except credentials.CredentialError as exc:
            raise _credential_error(exc) from None

    @extend_schema(responses={204: None, 409: OpenApiResponse(
        description="the credential is named by a BMC: change the site definition first")})
    def destroy(self, request, *args, **kwargs):
        try:
            credentials.delete(self.get_object().name)
        except credentials.CredentialError as exc:
            return error_response(409, "in_use", str(exc), request)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- site import by upload -----------------------------------------------------------------------


class YAMLTextParser(parsers.BaseParser):
    """A raw site definition as the request body (`curl --data-binary @site.yml -H 'Content-Type: application/yaml'`)."""

    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        return {"text": stream.read() if stream is not None else b""}


class TextYAMLParser(YAMLTextParser):
    media_type = "text/yaml"


class PlainTextParser(YAMLTextParser):
    media_type = "text/plain"


class SiteUploadSerializer(serializers.Serializer):
    file = serializers.FileField(help_text="the site definition (YAML)")
    dry_run = serializers.BooleanField(required=False, default=False,
                                       help_text="report the changes an import would make, change nothing")


class SiteChangeSerializer(serializers.Serializer):
    action = serializers.ChoiceField(choices=["create", "update", "delete"])
    model = serializers.CharField(help_text="node, bmc, gpu, pool, ...")
    name = serializers.CharField()
    fields = serializers.DictField(help_text="field -> [old, new]; secrets show only that they changed")
    text = serializers.CharField(help_text="the change in one line, as the site command prints it")


class SiteImportReportSerializer(serializers.Serializer):
    filename = serializers.CharField()
    appliance = serializers.CharField()
    dry_run = serializers.BooleanField()
    changed = serializers.BooleanField()
    counts = serializers.DictField(child=serializers.IntegerField(), help_text="create/update/delete -> count")
    changes = SiteChangeSerializer(many=True)


class SiteValidationReportSerializer(serializers.Serializer):
    filename = serializers.CharField()
    appliance = serializers.CharField()
    valid = serializers.BooleanField()
    summary = serializers.CharField()


class SiteErrorSerializer(serializers.Serializer):
    file = serializers.CharField()
    line = serializers.IntegerField(allow_null=True)
    path = serializers.CharField()
    message = serializers.CharField()


SITE_PARAMETERS = [
    OpenApiParameter("filename", OpenApiTypes.STR, OpenApiParameter.QUERY,
                     description="name to report errors against when the YAML is sent as the raw body"),
]
SITE_REQUEST = {"multipart/form-data": SiteUploadSerializer, "application/yaml": OpenApiTypes.STR,
                "text/yaml": OpenApiTypes.STR, "text/plain": OpenApiTypes.STR}
SITE_ERROR = OpenApiResponse(description="the site definition is invalid: `error.errors` lists every error "
                                         "with file, line, path and message")


class SiteDefinitionView(APIView):
    capability = "inventory.change"
    write_capability = "inventory.change"
    parser_classes = [parsers.MultiPartParser, parsers.FormParser, YAMLTextParser, TextYAMLParser, PlainTextParser]
    max_bytes = 10 * 1024 * 1024

    def read_site(self, request) -> tuple[str, str]:
        """The uploaded text and the name to report errors against."""
        upload = request.data.get("file")
        if upload is not None and hasattr(upload, "read"):
            if upload.size > self.max_bytes:
                raise serializers.ValidationError({"file": [f"larger than {self.max_bytes} bytes"]})
            raw, filename = upload.read(), upload.name
        else:
            raw = request.data.get("text", b"")
            filename = request.query_params.get("filename", "") or "site.yml"
            if not raw:
                raise serializers.ValidationError(
                    {"file": ["send the site definition as a multipart `file` or as the request body"]})
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
        except UnicodeDecodeError as exc:
            raise serializers.ValidationError({"file": [f"not UTF-8 text (byte {exc.start})"]}) from None
        return text, filename.replace("\\", "/").rsplit("/", 1)[-1] or "site.yml"

    def dry_run_requested(self, request) -> bool:
        value = request.query_params.get("dry_run")
        if value is None:
            value = request.data.get("dry_run")
        return serializers.BooleanField().to_internal_value(value) if value not in (None, "") else False

    def invalid(self, request, exc):
        errors = [{"file": e.file, "line": e.line, "path": e.path, "message": e.message} for e in exc.errors]
        message = f"{len(errors)} error(s) in the site definition"
        return error_response(400, "invalid_site", message, request, errors=errors)


class SiteImportView(SiteDefinitionView):
    @extend_schema(request=SITE_REQUEST, parameters=[*SITE_PARAMETERS, OpenApiParameter(
        "dry_run", OpenApiTypes.BOOL, OpenApiParameter.QUERY, description="change nothing, report what would change")],
        responses={200: SiteImportReportSerializer, 400: SITE_ERROR})
    def post(self, request):
        """Import a site definition (idempotent: a re-import applies only the differences)."""
        from .services import import_site
        from .sitedef import SiteValidationError

        text, filename = self.read_site(request)
        dry_run = self.dry_run_requested(request)
        try:
            report = import_site(text, filename, dry_run=dry_run, user=request.user)
        except SiteValidationError as exc:
            return self.invalid(request, exc)
        return Response(import_report(report, filename))


class SiteValidateView(SiteDefinitionView):
    @extend_schema(request=SITE_REQUEST, parameters=SITE_PARAMETERS,
                   responses={200: SiteValidationReportSerializer, 400: SITE_ERROR})
    def post(self, request):
        """Check a site definition; writes nothing."""
        from .services import validate_site
        from .sitedef import SiteValidationError

        text, filename = self.read_site(request)
        try:
            site = validate_site(text, filename)
        except SiteValidationError as exc:
            return self.invalid(request, exc)
        return Response({"filename": filename, "appliance": site.name, "valid": True, "summary": site.summary()})


def import_report(result, filename: str) -> dict:
    """The API's view of an ImportResult (appliance.inventory.services)."""
    return {
        "filename": filename, "appliance": result.site.name, "dry_run": result.dry_run, "changed": result.changed,
        "counts": result.counts(),
        "changes": [{"action": c.action, "model": c.model, "name": c.name, "fields": c.fields, "text": str(c)}
                    for c in result.changes],
    }
