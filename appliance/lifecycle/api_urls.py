"""REST API of the model lifecycle under /api/v1/lifecycle/ (api.py). A model is named by its name, a
version by its number within the model; the services check the names' patterns (a 404 names what is
missing)."""

from django.urls import path
from rest_framework.routers import APIRootView

from . import api


class LifecycleRootView(APIRootView):
    """The model lifecycle API's endpoints."""

    capability = "models.view"
    api_root_dict = {"models": "lifecycle-api-models", "versions": "lifecycle-api-versions",
                     "requests": "lifecycle-api-requests", "deployments": "lifecycle-api-deployments"}


VERSION = "models/<str:name>/versions/<int:number>/"

urlpatterns = [
    path("", LifecycleRootView.as_view(), name="lifecycle-api-root"),
    path("models/", api.ModelListAPIView.as_view(), name="lifecycle-api-models"),
    path("models/<str:name>/", api.ModelAPIView.as_view(), name="lifecycle-api-model"),
    path("models/<str:name>/history/", api.HistoryAPIView.as_view(), name="lifecycle-api-history"),
    path("models/<str:name>/aliases/<str:alias>/", api.AliasAPIView.as_view(), name="lifecycle-api-alias"),
    path("versions/", api.VersionListAPIView.as_view(), name="lifecycle-api-versions"),
    path(VERSION, api.VersionAPIView.as_view(), name="lifecycle-api-version"),
    path(VERSION + "evaluations/", api.EvaluationListAPIView.as_view(), name="lifecycle-api-evaluations"),
    path(VERSION + "transition/", api.TransitionAPIView.as_view(), name="lifecycle-api-transition"),
    path(VERSION + "verify/", api.VerifyAPIView.as_view(), name="lifecycle-api-verify"),
    path(VERSION + "clear-tampered/", api.ClearTamperedAPIView.as_view(), name="lifecycle-api-clear-tampered"),
    path(VERSION + "card/", api.CardAPIView.as_view(), name="lifecycle-api-card"),
    path("requests/", api.RequestListAPIView.as_view(), name="lifecycle-api-requests"),
    path("requests/<int:pk>/", api.RequestAPIView.as_view(), name="lifecycle-api-request"),
    path("requests/<int:pk>/approve/", api.RequestApproveAPIView.as_view(), name="lifecycle-api-request-approve"),
    path("requests/<int:pk>/reject/", api.RequestRejectAPIView.as_view(), name="lifecycle-api-request-reject"),
    path("requests/<int:pk>/cancel/", api.RequestCancelAPIView.as_view(), name="lifecycle-api-request-cancel"),
    path("deployments/", api.DeploymentListAPIView.as_view(), name="lifecycle-api-deployments"),
    path("deployments/<int:pk>/", api.DeploymentAPIView.as_view(), name="lifecycle-api-deployment"),
    path("deployments/<int:pk>/rollback/", api.DeploymentRollbackAPIView.as_view(),
         name="lifecycle-api-deployment-rollback"),
    path("deployments/<int:pk>/stop/", api.DeploymentStopAPIView.as_view(), name="lifecycle-api-deployment-stop"),
]
