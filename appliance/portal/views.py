from datetime import timedelta

from django.db.models import Avg, Count, Exists, F, IntegerField, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone
from django.views.generic import TemplateView

from appliance.analytics.models import CAUSE_FIELDS, CauseHour, Finding
from appliance.analytics.views import CAUSE_NAMES
from appliance.core.permissions import CapabilityMixin
from appliance.core.roles import can
from appliance.inventory.choices import ComponentKind, HealthStatus
from appliance.inventory.models import GPU, Appliance, HealthCheck, Node
from appliance.inventory.states import NodeState
from appliance.lending.models import LendingPlan, PlanState
from appliance.provisioning.models import AcceptanceCheck
from appliance.telemetry.models import MINUTE, WHOLE_GPU, GpuRollup, HardwareEvent
from appliance.telemetry.queries import ALERT_KINDS, live_summary

# The Overview names at most this many nodes that need attention; the node list has the rest.
ATTENTION_SHOWN = 20
# ... and at most this many idle GPUs (the Telemetry page has every GPU).
IDLE_SHOWN = 24
# A lending plan in one of these states is under way: the Overview counts it.
PLANS_UNDER_WAY = (PlanState.PROPOSED, PlanState.APPROVED, PlanState.DRAINING, PlanState.MOVED, PlanState.ACTIVE,
                   PlanState.RECLAIMING)


def idle_gpus(bucket: str | None) -> list[dict]:
    """The GPUs under 5 % in the newest minute the Overview shows (the figure "idle" counts), by node and
    index, with whether a job held them: an allocated GPU idling is not a free one."""
    if not bucket:
        return []
    rows = (GpuRollup.objects.filter(step=MINUTE, instance=WHOLE_GPU, start=bucket, util__lt=5)
            .order_by("node__name", "gpu").values("node__name", "gpu", "util", "job")[:IDLE_SHOWN])
    return [{"node": row["node__name"], "gpu": row["gpu"], "util": row["util"], "job": row["job"]} for row in rows]


TREND_MINUTES = 60


def utilization_trend(now) -> dict | None:
    """The fleet's mean GPU utilization each minute of the last hour, as an SVG polyline's points (x: minutes,
    0-60; y: 0 at 100 %, 30 at 0 %), with the first and last figures; None without two minutes of data."""
    since = now.replace(second=0, microsecond=0) - timedelta(minutes=TREND_MINUTES)
    rows = list(GpuRollup.objects.filter(step=MINUTE, instance=WHOLE_GPU, start__gte=since, util__isnull=False)
                .values("start").annotate(util=Avg("util")).order_by("start"))
    if len(rows) < 2:
        return None
    points = " ".join(f"{(row['start'] - since).total_seconds() / 60:.0f},{30 - 0.3 * row['util']:.1f}"
                      for row in rows)
    return {"points": points, "first": f"{rows[0]['util']:.0f}", "last": f"{rows[-1]['util']:.0f}",
            "low": f"{min(row['util'] for row in rows):.0f}", "high": f"{max(row['util'] for row in rows):.0f}",
            "minutes": len(rows)}


def idle_by_cause(now) -> list[dict]:
    """The idle GPU-hours of the current and the previous hour by cause (the ledger's, every cause but busy
    and no data), most first."""
    since = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    causes = [label for label in CAUSE_FIELDS if label not in ("busy", "no-data")]
    sums = CauseHour.objects.filter(hour__gte=since).aggregate(
        **{label.replace("-", "_"): Sum(CAUSE_FIELDS[label]) for label in causes})
    entries = [{"label": label, "name": CAUSE_NAMES[label], "hours": (sums[label.replace("-", "_")] or 0) / 3600}
               for label in causes]
    return sorted((e for e in entries if e["hours"] >= 0.005), key=lambda e: (-e["hours"], e["label"]))


def launch_pad(user) -> list[dict]:
    """The figures an operator starts from, each with the list behind it (only those the user may open):
    open recommendations, lending plans under way, jobs and services holding GPUs now, open alerts."""
    figures = []
    if can(user, "analytics.view"):
        figures.append({"name": "findings", "count": Finding.objects.filter(state=Finding.State.OPEN).count(),
                        "url": reverse("analytics:recommendations")})
        figures.append({"name": "plans", "count": LendingPlan.objects.filter(state__in=PLANS_UNDER_WAY).count(),
                        "url": reverse("lending:plans")})
    if can(user, "telemetry.view"):
        newest = (GpuRollup.objects.filter(step=MINUTE, instance=WHOLE_GPU).order_by("-start")
                  .values_list("start", flat=True).first())
        holders = 0 if newest is None else (GpuRollup.objects.filter(step=MINUTE, start=newest).exclude(job="")
                                            .values("job").distinct().count())
        figures.append({"name": "jobs", "count": holders, "url": reverse("telemetry:jobs")})
        figures.append({"name": "alerts", "count": HardwareEvent.objects.filter(
            kind__in=ALERT_KINDS, acknowledged_at__isnull=True).count(), "url": reverse("telemetry:alerts")})
    return figures


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
            launch=launch_pad(self.request.user),
        )
        if can(self.request.user, "telemetry.view"):
            now = timezone.now()
            context["trend"] = utilization_trend(now)
            context["idle_causes"] = idle_by_cause(now) if can(self.request.user, "analytics.view") else []
        context["idle_gpus"] = idle_gpus(context["gpu_live"]["bucket"])
        context["idle_shown"] = IDLE_SHOWN
        return context
