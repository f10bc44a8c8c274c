"""MLflow's model registry REST API under /api/2.0/mlflow/ (mlflow_api.py): the paths MLflow's client
calls (mlflow/protos/model_registry.proto); anything else answers ENDPOINT_NOT_FOUND."""

from django.urls import path, re_path

from . import mlflow_api as api

app_name = "mlflow"

urlpatterns = [
    path("registered-models/create", api.CreateRegisteredModel.as_view(), name="registered-models-create"),
    path("registered-models/get", api.GetRegisteredModel.as_view(), name="registered-models-get"),
    path("registered-models/search", api.SearchRegisteredModels.as_view(), name="registered-models-search"),
    path("registered-models/update", api.UpdateRegisteredModel.as_view(), name="registered-models-update"),
    path("registered-models/rename", api.RenameRegisteredModel.as_view(), name="registered-models-rename"),
    path("registered-models/delete", api.DeleteRegisteredModel.as_view(), name="registered-models-delete"),
    path("registered-models/set-tag", api.SetRegisteredModelTag.as_view(), name="registered-models-set-tag"),
    path("registered-models/delete-tag", api.DeleteRegisteredModelTag.as_view(), name="registered-models-delete-tag"),
    path("registered-models/alias", api.RegisteredModelAlias.as_view(), name="registered-models-alias"),
    path("registered-models/get-latest-versions", api.GetLatestVersions.as_view(),
         name="registered-models-get-latest-versions"),
    path("model-versions/create", api.CreateModelVersion.as_view(), name="model-versions-create"),
    path("model-versions/get", api.GetModelVersion.as_view(), name="model-versions-get"),
    path("model-versions/update", api.UpdateModelVersion.as_view(), name="model-versions-update"),
    path("model-versions/delete", api.DeleteModelVersion.as_view(), name="model-versions-delete"),
    path("model-versions/search", api.SearchModelVersions.as_view(), name="model-versions-search"),
    path("model-versions/set-tag", api.SetModelVersionTag.as_view(), name="model-versions-set-tag"),
    path("model-versions/delete-tag", api.DeleteModelVersionTag.as_view(), name="model-versions-delete-tag"),
    path("model-versions/get-download-uri", api.GetModelVersionDownloadUri.as_view(),
         name="model-versions-get-download-uri"),
    path("model-versions/transition-stage", api.TransitionModelVersionStage.as_view(),
         name="model-versions-transition-stage"),
    re_path(r"^.*$", api.UnknownEndpoint.as_view(), name="unknown"),
]
