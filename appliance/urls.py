from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from appliance.core import api_root
from appliance.core import views as core_views
from appliance.core.views import health
from appliance.portal.views_docs import DocsView

# Version 1 of the REST API, under /api/v1/. A later, incompatible version gets its own list and prefix
# (and its own entry in api_root.API_VERSIONS); v1 stays as it is for the clients written against it.
api_v1_patterns = [
    path("", api_root.ApiV1RootView.as_view(), name="api-v1-root"),
    path("inventory/", include("appliance.inventory.api_urls")),
    path("accounts/", include("appliance.accounts.api_urls")),
    path("audit/", include("appliance.audit.api_urls")),
    path("provisioning/", include("appliance.provisioning.api_urls")),
    path("telemetry/", include("appliance.telemetry.api_urls")),
    path("analytics/", include("appliance.analytics.api_urls")),
    path("lending/", include("appliance.lending.api_urls")),
    path("partitioning/", include("appliance.partitioning.api_urls")),
    path("lifecycle/", include("appliance.lifecycle.api_urls")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's start script as a file: the Content-Security-Policy forbids inline scripts.
    path("schema/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="schema-docs"),
    path("schema/redoc/", core_views.ApiReferenceView.as_view(url_name="schema"), name="schema-redoc"),
]

urlpatterns = [
    path("", include("appliance.portal.urls")),
    path("accounts/", include("appliance.accounts.urls")),
    path("inventory/", include("appliance.inventory.urls")),
    path("audit/", include("appliance.audit.urls")),
    path("provisioning/", include("appliance.provisioning.urls")),
    # The collectors' write endpoint (InfluxDB v2's write API; token per node, no session, no CSRF).
    path("telemetry/ingest/", include("appliance.telemetry.ingest_urls")),
    path("telemetry/", include("appliance.telemetry.urls")),
    path("analytics/", include("appliance.analytics.urls")),
    path("lending/", include("appliance.lending.urls")),
    path("partitioning/", include("appliance.partitioning.urls")),
    path("models/", include("appliance.lifecycle.urls")),
    # MLflow's registry REST API, at the root as MLflow clients expect it (the appliance's URL is their
    # registry URI): appliance/lifecycle/mlflow_api.py.
    path("api/2.0/mlflow/", include("appliance.lifecycle.mlflow_urls")),
    # GET /api/ names the versions; anything else under /api/ outside a version is a 404 whose message
    # points to /api/v1/ (core_views.page_not_found), not a redirect: see appliance.core.api_root.
    path("api/", api_root.api_index, name="api-index"),
    path("api/v1/", include(api_v1_patterns)),
    path("django-admin/", admin.site.urls),
    path("health/", health, name="health"),
    # The documentation site, built on the appliance (appliance/portal/docs.py).
    re_path(r"^docs/(?P<path>.*)$", DocsView.as_view(), name="docs"),
    # The language switch: set_language at /i18n/setlang/ (a POST that sets the language cookie).
    path("i18n/", include("django.conf.urls.i18n")),
]

handler400 = core_views.bad_request
handler403 = core_views.permission_denied
handler404 = core_views.page_not_found
handler500 = core_views.server_error
