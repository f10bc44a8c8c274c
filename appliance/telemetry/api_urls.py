from django.urls import path
from rest_framework.routers import APIRootView

from . import api, converters  # noqa: F401 (converters: registers telemetry_node and telemetry_job)


class TelemetryRootView(APIRootView):
    """The telemetry API's endpoints."""

    capability = "telemetry.view"
    api_root_dict = {"overview": "telemetry-api-overview", "live": "telemetry-api-live",
                     "jobs": "telemetry-api-jobs", "alerts": "telemetry-api-alerts"}


urlpatterns = [
    path("", TelemetryRootView.as_view(), name="telemetry-api-root"),
    path("overview/", api.OverviewAPIView.as_view(), name="telemetry-api-overview"),
    path("live/", api.LiveAPIView.as_view(), name="telemetry-api-live"),
    path("nodes/<telemetry_node:name>/", api.NodeSeriesAPIView.as_view(), name="telemetry-api-node"),
    path("nodes/<telemetry_node:name>/gpus/<int:gpu>/", api.GpuSeriesAPIView.as_view(), name="telemetry-api-gpu"),
    path("jobs/", api.JobListAPIView.as_view(), name="telemetry-api-jobs"),
    path("jobs/<telemetry_job:job>/", api.JobAPIView.as_view(), name="telemetry-api-job"),
    path("alerts/", api.AlertListAPIView.as_view(), name="telemetry-api-alerts"),
    path("alerts/<int:pk>/acknowledge/", api.AcknowledgeAPIView.as_view(), name="telemetry-api-acknowledge"),
]
