from django.db.models import Count, Exists, F, IntegerField, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce
from django.views.generic import TemplateView

from appliance.core.permissions import CapabilityMixin
from appliance.inventory.choices import ComponentKind, HealthStatus
from appliance.inventory.models import GPU, Appliance, HealthCheck, Node
from appliance.inventory.states import NodeState
from appliance.provisioning.models import AcceptanceCheck
from appliance.telemetry.queries import live_summary

# The Overview names at most this many nodes that need attention; the node list has the rest.
ATTENTION_SHOWN = 20


def _latest_acceptance_run(node_ref: str):
    """The run that last measured the node `node_ref` points at (its latest acceptance report)."""
    return (AcceptanceCheck.objects.filter(node=OuterRef(node_ref))
            .order_by("-report__run_id").values("report__run_id")[:1])


def failing_nodes():
    """Ids of the nodes with a failing health check (a subquery, never a list of ids)."""
    return HealthCheck.objects.filter(status=HealthStatus.FAILING).values("node")


def rejected_nodes():
    """Ids of the nodes a check of their latest acceptance run failed. Only failed checks are looked at,
    each against its node's latest run, so the work grows with the failures, not with the fleet."""
    return (AcceptanceCheck.objects.filter(passed=False, node__isnull=False)
            .annotate(latest=Subquery(_latest_acceptance_run("node"), output_field=IntegerField()))
            .filter(report__run_id=F("latest")).values("node"))


def with_health(nodes):
    """Annotate a (short, sliced) list of nodes with their failing checks, the first one's evidence and
    their latest acceptance verdict (the run, and whether a check of it failed)."""
    failing = (HealthCheck.objects.filter(node=OuterRef("pk"), status=HealthStatus.FAILING)
               .order_by().values("node").annotate(n=Count("id")).values("n"))
    first_failure = (HealthCheck.objects.filter(node=OuterRef("pk"), status=HealthStatus.FAILING)
                     .order_by("component_kind", "component_id", "name").values("evidence")[:1])
    return nodes.annotate(
        failing_checks=Coalesce(Subquery(failing, output_field=IntegerField()), Value(0)),
        first_failure=Subquery(first_failure),
        acceptance_run=Subquery(_latest_acceptance_run("pk"), output_field=IntegerField()),
        acceptance_failed=Exists(rejected_nodes().filter(node=OuterRef("pk"))),
    )


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
        nodes = Node.objects.exclude(state=NodeState.RETIRED)
        total = nodes.count()
        failing = nodes.filter(pk__in=failing_nodes()).count()
        # Exists, one index lookup per node: an IN over every check ever stored would read them all.
        measured = nodes.filter(Exists(AcceptanceCheck.objects.filter(node=OuterRef("pk")))).count()
        rejected = nodes.filter(pk__in=rejected_nodes()).count()
        health = {"healthy": total - failing, "failing": failing, "accepted": measured - rejected,
                  "rejected": rejected, "unmeasured": total - measured,
                  "by_hand": nodes.filter(state_by_hand=True).count()}
        gpu_rows = HealthCheck.objects.filter(component_kind=ComponentKind.GPU, status=HealthStatus.FAILING)
        attention = nodes.filter(Q(pk__in=failing_nodes()) | Q(pk__in=rejected_nodes()) | Q(state_by_hand=True)
                                 | Q(state=NodeState.FAILED)).order_by("name")
        context.update(
            appliances=appliances,
            states=[(state.label, by_state.get(state.value, 0), state.value) for state in NodeState],
            roles=[(role.label, by_role.get(role.value, 0)) for role in Node.Role],
            gpu_count=GPU.objects.count(),
            health=health,
            gpus_missing=gpu_rows.filter(name="present").values("node", "component_id").distinct().count(),
            gpus_failing=gpu_rows.values("node", "component_id").distinct().count(),
            attention=list(with_health(attention)[:ATTENTION_SHOWN]),
            attention_count=attention.count(),
            attention_shown=ATTENTION_SHOWN,
            # A few aggregate queries over the newest minute, never per-GPU rows: the Telemetry page has those.
            gpu_live=live_summary(),
        )
        return context
