from django.urls import path
from rest_framework.routers import APIRootView

from . import api


class PartitioningRootView(APIRootView):
    """The partitioning API's endpoints."""

    capability = "partitioning.view"
    api_root_dict = {"layout": "partitioning-api-layout", "plans": "partitioning-api-plans",
                     "preview": "partitioning-api-preview", "rollback": "partitioning-api-rollback",
                     "size": "partitioning-api-size"}


urlpatterns = [
    path("", PartitioningRootView.as_view(), name="partitioning-api-root"),
    path("layout/", api.LayoutAPIView.as_view(), name="partitioning-api-layout"),
    path("plans/", api.PlanListAPIView.as_view(), name="partitioning-api-plans"),
    path("plans/<int:number>/", api.PlanAPIView.as_view(), name="partitioning-api-plan"),
    path("plans/<int:number>/apply/", api.ApplyAPIView.as_view(), name="partitioning-api-apply"),
    path("preview/", api.PreviewAPIView.as_view(), name="partitioning-api-preview"),
    path("rollback/", api.RollbackAPIView.as_view(), name="partitioning-api-rollback"),
    path("size/", api.SizeAPIView.as_view(), name="partitioning-api-size"),
]
