"""Filters of the inventory, shared by the REST API and the portal's lists.

Related objects filter NetBox-style by name (`appliance=demo`) or by id (`appliance_id=1`).
"""

import django_filters

from appliance.core.filters import FilterSet, IntegerFilter, MultipleChoiceFilter

from .models import GPU, HCA, Appliance, Filesystem, HCAPort, Network, Node, Platform, Pool, Switch
from .states import NodeState


class ApplianceScopedFilterSet(FilterSet):
    appliance = django_filters.CharFilter(field_name="appliance__name", label="Appliance (name)")
    appliance_id = IntegerFilter(field_name="appliance_id", label="Appliance (id)")


class ApplianceFilterSet(FilterSet):
    class Meta:
        model = Appliance
        fields = ["name", "simulated"]


class PlatformFilterSet(FilterSet):
    class Meta:
        model = Platform
        fields = ["slug", "gpu_model", "gpu_count"]


class NodeFilterSet(ApplianceScopedFilterSet):
    role = MultipleChoiceFilter(choices=Node.Role.choices)
    state = MultipleChoiceFilter(choices=NodeState.choices)
    pool = django_filters.CharFilter(field_name="pool_membership__pool__name", label="Pool (name)")
    pool_id = IntegerFilter(field_name="pool_membership__pool_id", label="Pool (id)")
    platform = django_filters.CharFilter(field_name="platform__slug", label="Platform (slug)")

    class Meta:
        model = Node
        fields = ["name", "role", "state", "appliance", "appliance_id", "pool", "pool_id", "platform"]


class GPUFilterSet(FilterSet):
    node = django_filters.CharFilter(field_name="node__name", label="Node (name)")
    node_id = IntegerFilter(field_name="node_id", label="Node (id)")
    model = django_filters.CharFilter(lookup_expr="iexact")
    mig_mode = MultipleChoiceFilter(choices=GPU.MigMode.choices)

    class Meta:
        model = GPU
        fields = ["node", "node_id", "index", "uuid", "model", "mig_capable", "mig_mode"]


class HCAFilterSet(FilterSet):
    node = django_filters.CharFilter(field_name="node__name", label="Node (name)")
    node_id = IntegerFilter(field_name="node_id", label="Node (id)")

    class Meta:
        model = HCA
        fields = ["node", "node_id", "device", "model"]


class HCAPortFilterSet(FilterSet):
    node = django_filters.CharFilter(field_name="hca__node__name", label="Node (name)")
    node_id = IntegerFilter(field_name="hca__node_id", label="Node (id)")
    hca_id = IntegerFilter(field_name="hca_id", label="HCA (id)")

    class Meta:
        model = HCAPort
        fields = ["node", "node_id", "hca_id", "port", "link_layer", "state", "rate_gbps"]


class SwitchFilterSet(ApplianceScopedFilterSet):
    class Meta:
        model = Switch
        fields = ["name", "kind", "tier", "appliance", "appliance_id"]


class NetworkFilterSet(ApplianceScopedFilterSet):
    class Meta:
        model = Network
        fields = ["name", "kind", "appliance", "appliance_id"]


class FilesystemFilterSet(ApplianceScopedFilterSet):
    class Meta:
        model = Filesystem
        fields = ["name", "type", "appliance", "appliance_id"]


class PoolFilterSet(ApplianceScopedFilterSet):
    class Meta:
        model = Pool
        fields = ["name", "kind", "appliance", "appliance_id"]
