from rest_framework.routers import APIRootView, DefaultRouter

from . import api


class ProvisioningRootView(APIRootView):
    """The provisioning API's endpoints."""

    capability = "provisioning.view"


router = DefaultRouter()
router.APIRootView = ProvisioningRootView
router.register("runs", api.RunViewSet, basename="provisioning-run")
router.register("stage-runs", api.StageRunViewSet, basename="provisioning-stagerun")
router.register("events", api.TaskEventViewSet, basename="provisioning-taskevent")
urlpatterns = router.urls
