from django.db.models import Count, Q
from django.views.generic import TemplateView

from appliance.core.permissions import CapabilityMixin
from appliance.inventory.models import GPU, Appliance, Node
from appliance.inventory.states import NodeState


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
        context.update(
            appliances=appliances,
            states=[(state.label, by_state.get(state.value, 0), state.value) for state in NodeState],
            roles=[(role.label, by_role.get(role.value, 0)) for role in Node.Role],
            gpu_count=GPU.objects.count(),
        )
        return context
