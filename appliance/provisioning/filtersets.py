"""Filters of provisioning's lists (the REST API)."""

from appliance.core.filters import FilterSet, IntegerFilter

from .models import TaskEvent


class TaskEventFilterSet(FilterSet):
    after = IntegerFilter(field_name="counter", lookup_expr="gt", label="only events after this counter")

    class Meta:
        model = TaskEvent
        fields = ["stage_run", "stage_run__run", "host", "event", "failed", "changed", "after"]
