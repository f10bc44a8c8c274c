from django.urls import path
from rest_framework.routers import APIRootView

from appliance.telemetry import converters  # noqa: F401 (registers telemetry_job)

from . import api, findings_api_urls


class AnalyticsRootView(APIRootView):
    """The analytics API's endpoints."""

    capability = "analytics.view"
    api_root_dict = {"efficiency": "analytics-api-efficiency", "report": "analytics-api-report",
                     "findings": "analytics-api-findings"}


urlpatterns = [
    path("", AnalyticsRootView.as_view(), name="analytics-api-root"),
    path("efficiency/", api.EfficiencyAPIView.as_view(), name="analytics-api-efficiency"),
    path("jobs/<telemetry_job:job>/verdicts/", api.JobVerdictsAPIView.as_view(), name="analytics-api-job-verdicts"),
    path("report/", api.ReportAPIView.as_view(), name="analytics-api-report"),
] + findings_api_urls.urlpatterns
