from django.db.models import Count, Exists, IntegerField, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce
from django.views.generic import TemplateView

from appliance.core.permissions import CapabilityMixin
from appliance.inventory.choices import ComponentKind, HealthStatus
from appliance.inventory.models import GPU, Appliance, HealthCheck, Node
from appliance.inventory.states import NodeState
from appliance.provisioning.models import AcceptanceCheck

# The Overview names at most this many nodes that need attention; the node list has the rest.
ATTENTION_SHOWN = 20


def nodes_with_health():
    """Nodes annotated with their failing checks and their latest acceptance verdict: the run that last
    measured them (`acceptance_run`, None if none did) and whether a check of that run failed."""
    failing = (HealthCheck.objects.filter(node=OuterRef("pk"), status=HealthStatus.FAILING)
               .order_by().values("node").annotate(n=Count("id")).values("n"))
    latest_run = (AcceptanceCheck.objects.filter(node=OuterRef("pk"))
                  .order_by("-report__run_id").values("report__run_id")[:1])
    return Node.objects.annotate(
        failing_checks=Coalesce(Subquery(failing, output_field=IntegerField()), Value(0)),
        acceptance_run=Subquery(latest_run, output_field=IntegerField()),
    ).annotate(acceptance_failed=Exists(AcceptanceCheck.objects.filter(
        node=OuterRef("pk"), report__run_id=OuterRef("acceptance_run"), passed=False)))


class OverviewView(CapabilityMixin, TemplateView):
    capability = "portal.view"
    template_name = "portal/overview.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        appliances = Appliance.objects.annotate(
            node_count=Count("nodes", distinct=True),
            ready_count=Count("nodes", filter=Q(nodes__state=NodeState.READY), distinct=True),
            failed_count=Count("nodes", filter=Q(nodes__state=NodeState.FAILED), distinct=True),
        )
        by_state = dict(Node.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n"))
        by_role = dict(Node.objects.values_list("role").annotate(n=Count("id")).values_list("role", "n"))
        nodes = nodes_with_health().exclude(state=NodeState.RETIRED)
        measured = Q(acceptance_run__isnull=False)
        totals = nodes.aggregate(
            healthy=Count("pk", filter=Q(failing_checks=0)),
            failing=Count("pk", filter=Q(failing_checks__gt=0)),
            accepted=Count("pk", filter=measured & Q(acceptance_failed=False)),
            rejected=Count("pk", filter=measured & Q(acceptance_failed=True)),
            unmeasured=Count("pk", filter=~measured),
            by_hand=Count("pk", filter=Q(state_by_hand=True)),
        )
        gpu_rows = HealthCheck.objects.filter(component_kind=ComponentKind.GPU, status=HealthStatus.FAILING)
        first_failure = (HealthCheck.objects.filter(node=OuterRef("pk"), status=HealthStatus.FAILING)
                         .order_by("component_kind", "component_id", "name").values("evidence")[:1])
        attention = (nodes.annotate(first_failure=Subquery(first_failure)).filter(Q(failing_checks__gt=0) | Q(acceptance_failed=True) | Q(state_by_hand=True)
                                  | Q(state=NodeState.FAILED)).order_by("name"))
        context.update(
            appliances=appliances,
            states=[(state.label, by_state.get(state.value, 0), state.value) for state in NodeState],
            roles=[(role.label, by_role.get(role.value, 0)) for role in Node.Role],
            gpu_count=GPU.objects.count(),
            health=totals,
            gpus_missing=gpu_rows.filter(name="present").values("node", "component_id").distinct().count(),
            gpus_failing=gpu_rows.values("node", "component_id").distinct().count(),
            attention=list(attention[:ATTENTION_SHOWN]),
            attention_count=attention.count(),
            attention_shown=ATTENTION_SHOWN,
        )
        return context
