"""URLs of views that forget to declare a capability, mounted only by tests/core/test_default_deny.py."""

from django.http import HttpResponse
from django.urls import include, path
from django.views import View
from rest_framework.response import Response
from rest_framework.views import APIView

from appliance.core.permissions import CapabilityMixin


class UndeclaredAPI(APIView):
    def get(self, request):
        return Response({"secret": "open"})

    def post(self, request):
        return Response({"secret": "written"})


class ReadOnlyDeclaredAPI(APIView):
    capability = "portal.view"  # no write_capability: writes are nobody's

    def get(self, request):
        return Response({"read": True})

    def post(self, request):
        return Response({"secret": "written"})


class UndeclaredPage(CapabilityMixin, View):
    def get(self, request):
        return HttpResponse("secret page")

    def post(self, request):
        return HttpResponse("secret form")


class ReadOnlyDeclaredPage(CapabilityMixin, View):
    capability = "portal.view"

    def get(self, request):
        return HttpResponse("read page")

    def post(self, request):
        return HttpResponse("secret form")


undeclared_patterns = [
    path("api/undeclared/", UndeclaredAPI.as_view()),
    path("api/read-only/", ReadOnlyDeclaredAPI.as_view()),
    path("undeclared/", UndeclaredPage.as_view()),
    path("read-only/", ReadOnlyDeclaredPage.as_view()),
]
# The project's own routes too: the 403 page links to them.
urlpatterns = [*undeclared_patterns, path("", include("appliance.urls"))]
