"""The global search page behind the frame's search box (appliance.portal.search does the finding)."""

from django.views.generic import TemplateView

from appliance.core.permissions import CapabilityMixin

from . import search


class SearchView(CapabilityMixin, TemplateView):
    capability = "portal.view"
    template_name = "portal/search.html"

    def get(self, request, *args, **kwargs):
        raw = request.GET.get("q", "")
        try:
            query, sections = search.search(request.user, raw)
        except search.SearchError as error:
            context = self.get_context_data(search_query=raw[:search.MAX_LENGTH], error=str(error), sections=[])
            return self.render_to_response(context, status=400)
        context = self.get_context_data(search_query=query, sections=sections, error="",
                                        found=sum(len(section.hits) for section in sections), limit=search.LIMIT)
        return self.render_to_response(context)
