from django.urls import path
from rest_framework.routers import APIRootView, DefaultRouter

from . import api


class ProvisioningRootView(APIRootView):
    """The provisioning API's endpoints."""

    capability = "provisioning.view"


router = DefaultRouter()
router.APIRootView = ProvisioningRootView
router.root_view_name = "provisioning-api-root"  # unique: /api/v1/ links to each app's root
router.register("runs", api.RunViewSet, basename="provisioning-run")
router.register("stage-runs", api.StageRunViewSet, basename="provisioning-stagerun")
router.register("events", api.TaskEventViewSet, basename="provisioning-taskevent")
urlpatterns = [
    path("acceptance/", api.AcceptanceReportAPIView.as_view(), name="provisioning-acceptance"),
    path("acceptance/html/", api.AcceptanceReportHTMLView.as_view(), name="provisioning-acceptance-html"),
    *router.urls,
]
