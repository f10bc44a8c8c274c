from django.urls import path
from rest_framework.routers import APIRootView, DefaultRouter

from . import api


class AuditRootView(APIRootView):
    """The audit API's endpoints."""

    capability = "audit.view"


router = DefaultRouter()
router.APIRootView = AuditRootView
router.root_view_name = "audit-api-root"  # unique: /api/v1/ links to each app's root
router.register("records", api.AuditRecordViewSet, basename="audit-record")

urlpatterns = [
    path("catalogue/", api.CatalogueView.as_view(), name="audit-catalogue"),
    path("exports/", api.ExportView.as_view(), name="audit-export"),
    *router.urls,
]
