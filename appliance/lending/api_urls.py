from django.urls import path
from rest_framework.routers import APIRootView

from . import api


class LendingRootView(APIRootView):
    """The lending API's endpoints."""

    capability = "analytics.view"
    api_root_dict = {"plans": "lending-api-plans", "policies": "lending-api-policies"}


urlpatterns = [
    path("", LendingRootView.as_view(), name="lending-api-root"),
    path("plans/", api.PlanListAPIView.as_view(), name="lending-api-plans"),
    path("plans/<int:pk>/", api.PlanAPIView.as_view(), name="lending-api-plan"),
    path("plans/<int:pk>/approve/", api.ApproveAPIView.as_view(), name="lending-api-approve"),
    path("plans/<int:pk>/reject/", api.RejectAPIView.as_view(), name="lending-api-reject"),
    path("plans/<int:pk>/rollback/", api.RollbackAPIView.as_view(), name="lending-api-rollback"),
    path("plans/<int:pk>/reclaim/", api.ReclaimAPIView.as_view(), name="lending-api-reclaim"),
    path("policies/", api.PolicyListAPIView.as_view(), name="lending-api-policies"),
    path("policies/<int:pool>/", api.PolicyAPIView.as_view(), name="lending-api-policy"),
]
