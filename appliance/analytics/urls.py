from django.urls import path

from appliance.telemetry import converters  # noqa: F401 (registers telemetry_job)

from . import findings_urls, views

app_name = "analytics"
urlpatterns = [
    path("", views.EfficiencyView.as_view(), name="efficiency"),
    path("jobs/<telemetry_job:job>/", views.JobView.as_view(), name="job"),
    path("report/", views.ReportView.as_view(), name="report"),
] + findings_urls.urlpatterns
