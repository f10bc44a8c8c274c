"""Serializers of the partitioning API. The requests of a plan are checked by the planner itself (one
message naming the item, e.g. "requests[3].memory_gb: ..."); here only their container and size."""

from rest_framework import serializers

from . import profiles
from .forms import DTYPES, MAX_REQUESTS
from .models import Plan

APPLIANCE_NAME = r"^[-a-zA-Z0-9_]{1,64}$"


class PlanSerializer(serializers.ModelSerializer):
    appliance = serializers.CharField(source="appliance.name", read_only=True)
    state = serializers.CharField(read_only=True, help_text="one of " + ", ".join(Plan.State.values))
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)
    applied_by = serializers.CharField(source="applied_by.username", read_only=True, default=None)
    previous = serializers.IntegerField(source="previous.number", read_only=True, default=None)
    served_weight = serializers.SerializerMethodField()
    total_weight = serializers.SerializerMethodField()
    unplaced = serializers.SerializerMethodField()
    optimality = serializers.SerializerMethodField()

    class Meta:
        model = Plan
        fields = ["number", "appliance", "description", "state", "created", "created_by", "applied_by",
                  "applied_at", "run", "previous", "served_weight", "total_weight", "unplaced", "optimality"]
        read_only_fields = fields

    def get_served_weight(self, plan) -> float | None:
        return (plan.result or {}).get("served_weight")

    def get_total_weight(self, plan) -> float | None:
        return (plan.result or {}).get("total_weight")

    def get_optimality(self, plan) -> str | None:
        """"optimal", "within N % of the bound", or null (a plan saved from a file made elsewhere)."""
        optimality = (plan.result or {}).get("optimality")
        if not optimality:
            return None
        if optimality.get("status") == "optimal":
            return "optimal"
        return f"within {optimality.get('gap_percent'):g} % of the bound"

    def get_unplaced(self, plan) -> int:
        return len((plan.result or {}).get("unplaced") or [])


class PlanDetailSerializer(PlanSerializer):
    class Meta(PlanSerializer.Meta):
        fields = PlanSerializer.Meta.fields + ["requests", "gpus", "current", "result"]
        read_only_fields = fields


class PlanRequestSerializer(serializers.Serializer):
    appliance = serializers.RegexField(APPLIANCE_NAME, required=False,
                                       help_text="the appliance's name; default: the only (first) appliance")
    requests = serializers.ListField(child=serializers.DictField(), min_length=1, max_length=MAX_REQUESTS,
                                     help_text="[{name, memory_gb, compute_slices, replicas, isolation, weight, "
                                               "pool}], checked by the planner")


class PlanCreateSerializer(PlanRequestSerializer):
    description = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class ApplianceSerializer(serializers.Serializer):
    appliance = serializers.RegexField(APPLIANCE_NAME, required=False)


class OptimalitySerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["optimal", "within_bound"])
    gap_percent = serializers.FloatField(help_text="0 when optimal")
    bound_weight = serializers.FloatField(help_text="no plan serves more weight than this")
    plan_from = serializers.ChoiceField(choices=["greedy", "solver"])
    solver = serializers.CharField(allow_null=True, help_text="the solver and its version; null when not installed")
    solver_status = serializers.CharField(allow_null=True)
    note = serializers.CharField(help_text="how the plan and its bound were found, in words")


class PreviewSerializer(serializers.Serializer):
    """The planner's answer (see planner.plan): layout per GPU, placements, what does not fit, disruption."""

    gpus = serializers.ListField(child=serializers.DictField())
    placed = serializers.ListField(child=serializers.DictField())
    unplaced = serializers.ListField(child=serializers.DictField())
    served_weight = serializers.FloatField()
    total_weight = serializers.FloatField()
    disruption = serializers.DictField()
    optimality = OptimalitySerializer(help_text="optimal, or within gap_percent of bound_weight (no plan serves "
                                                "more), and how the plan was found")


class LayoutSerializer(serializers.Serializer):
    appliance = serializers.CharField()
    gpus = serializers.ListField(child=serializers.DictField())


class SizeRequestSerializer(serializers.Serializer):
    params = serializers.IntegerField(min_value=1_000, max_value=100_000_000_000_000,
                                      help_text="parameters of the model")
    layers = serializers.IntegerField(min_value=1, max_value=1000)
    kv_heads = serializers.IntegerField(min_value=1, max_value=1024)
    head_dim = serializers.IntegerField(min_value=1, max_value=4096)
    hidden_size = serializers.IntegerField(min_value=1, max_value=1 << 24, required=False)
    attention_heads = serializers.IntegerField(min_value=1, max_value=1 << 16, required=False)
    dtype = serializers.ChoiceField(choices=[value for value, _label in DTYPES], default="bf16")
    context = serializers.IntegerField(min_value=1, max_value=10_000_000, default=8192)
    concurrency = serializers.IntegerField(min_value=1, max_value=100_000, default=1)
    gpu = serializers.ChoiceField(choices=list(profiles.MODELS), default="h100-80gb")
    gpus_per_node = serializers.IntegerField(min_value=1, max_value=64, default=8)
    nodes = serializers.IntegerField(min_value=1, max_value=10_000, default=1)


class SizeResultSerializer(serializers.Serializer):
    """sizing.size's answer: bytes of weights, KV cache, activations and overhead, the placement, the
    throughput ceilings and every assumption."""

    weights_bytes = serializers.IntegerField()
    kv_bytes_per_token = serializers.IntegerField()
    kv_bytes = serializers.IntegerField()
    activation_bytes = serializers.IntegerField()
    overhead_bytes = serializers.IntegerField()
    total_bytes = serializers.IntegerField()
    fits = serializers.BooleanField()
    reason = serializers.CharField(allow_null=True)
    placement = serializers.DictField(allow_null=True)
    decode_tokens_per_s_ceiling = serializers.FloatField()
    prefill = serializers.DictField()
    assumptions = serializers.ListField(child=serializers.CharField())
