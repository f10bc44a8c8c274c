from django.urls import path

from . import converters, views  # noqa: F401 (converters: registers telemetry_node and telemetry_job)

app_name = "telemetry"
urlpatterns = [
    path("", views.TelemetryView.as_view(), name="index"),
    path("nodes/<telemetry_node:name>/", views.NodeTelemetryView.as_view(), name="node"),
    path("nodes/<telemetry_node:name>/gpus/<int:gpu>/", views.GpuTelemetryView.as_view(), name="gpu"),
    path("jobs/", views.JobListView.as_view(), name="jobs"),
    path("jobs/<telemetry_job:job>/", views.JobView.as_view(), name="job"),
    path("alerts/", views.AlertListView.as_view(), name="alerts"),
    path("alerts/<int:pk>/acknowledge/", views.AcknowledgeView.as_view(), name="acknowledge"),
]
