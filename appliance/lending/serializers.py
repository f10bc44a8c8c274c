"""How plans, steps and policies look to the API and the portal's live table (one shape for both)."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .models import LendingPlan, LendingPolicy, PlanState, PlanStep


# Plain strings with their values described: "state" and "outcome" enums already name other choice sets in
# the API, and the schema's enum components are named by field.
@extend_schema_field({"type": "string", "readOnly": True, "description": "one of " + ", ".join(PlanState.values)})
class PlanStateField(serializers.CharField):
    pass


@extend_schema_field({"type": "string", "readOnly": True,
                      "description": "one of " + ", ".join(PlanStep.Outcome.values)})
class OutcomeField(serializers.CharField):
    pass


class PlanStepSerializer(serializers.ModelSerializer):
    state = PlanStateField(read_only=True)
    outcome = OutcomeField(read_only=True)

    class Meta:
        model = PlanStep
        fields = ["name", "state", "outcome", "message", "details", "actor", "at"]


class LendingPlanSerializer(serializers.ModelSerializer):
    from_pool = serializers.CharField(source="from_pool.name")
    to_pool = serializers.CharField(source="to_pool.name")
    appliance = serializers.CharField(source="appliance.name")
    proposed_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    approved_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    finding = serializers.PrimaryKeyRelatedField(read_only=True, allow_null=True)
    state = PlanStateField(read_only=True)

    class Meta:
        model = LendingPlan
        fields = ["id", "appliance", "from_pool", "to_pool", "nodes", "window_start", "window_end", "reason", "state",
                  "proposed_by", "approved_by", "approved_automatically", "finding", "deadline", "run_id",
                  "reclaim_requested", "message", "created", "updated"]
        read_only_fields = fields


class LendingPlanDetailSerializer(LendingPlanSerializer):
    steps = PlanStepSerializer(many=True, read_only=True)

    class Meta(LendingPlanSerializer.Meta):
        fields = [*LendingPlanSerializer.Meta.fields, "steps"]
        read_only_fields = fields


class ProposeSerializer(serializers.Serializer):
    nodes = serializers.ListField(child=serializers.CharField(max_length=63), min_length=1, max_length=64)
    from_pool = serializers.CharField(max_length=64)
    to_pool = serializers.CharField(max_length=64)
    window_start = serializers.DateTimeField()
    window_end = serializers.DateTimeField()
    reason = serializers.CharField(max_length=1000)
    finding = serializers.IntegerField(required=False, allow_null=True, min_value=1)


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=1000)


class LendingPolicySerializer(serializers.ModelSerializer):
    pool = serializers.CharField(source="pool.name", read_only=True)
    pool_id = serializers.IntegerField(source="pool.pk", read_only=True)
    window_days = serializers.ListField(child=serializers.IntegerField(min_value=0, max_value=6), max_length=7,
                                        required=False)
    window_start_hour = serializers.IntegerField(min_value=0, max_value=23, required=False)
    window_end_hour = serializers.IntegerField(min_value=1, max_value=24, required=False)
    minimum_nodes = serializers.IntegerField(min_value=0, max_value=100000, required=False)
    reclaim_minutes = serializers.IntegerField(min_value=1, max_value=7 * 24 * 60, required=False)

    class Meta:
        model = LendingPolicy
        fields = ["pool", "pool_id", "may_lend", "minimum_nodes", "window_days", "window_start_hour",
                  "window_end_hour", "reclaim_minutes", "automatic_approval"]

    def validate_window_days(self, value):
        if len(set(value)) != len(value):
            raise serializers.ValidationError("a weekday is named twice")
        return sorted(value)
