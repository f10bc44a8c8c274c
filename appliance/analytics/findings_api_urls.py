from django.urls import path, re_path

from . import findings_api

urlpatterns = [
    path("findings/", findings_api.FindingListAPIView.as_view(), name="analytics-api-findings"),
    path("findings/<int:pk>/", findings_api.FindingAPIView.as_view(), name="analytics-api-finding"),
    path("findings/<int:pk>/accept/", findings_api.FindingAcceptAPIView.as_view(), name="analytics-api-finding-accept"),
    path("findings/<int:pk>/dismiss/", findings_api.FindingDismissAPIView.as_view(),
         name="analytics-api-finding-dismiss"),
    re_path(r"^profiles/(?P<job>[A-Za-z0-9._:-]{1,100})/$", findings_api.ProfileAPIView.as_view(),
            name="analytics-api-profile"),
]
