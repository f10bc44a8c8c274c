from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from appliance.core import views as core_views
from appliance.core.views import health

api_patterns = [
    path("inventory/", include("appliance.inventory.api_urls")),
    path("accounts/", include("appliance.accounts.api_urls")),
    path("audit/", include("appliance.audit.api_urls")),
    path("provisioning/", include("appliance.provisioning.api_urls")),
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
    path("api/", include(api_patterns)),
    path("django-admin/", admin.site.urls),
    path("health/", health, name="health"),
    # The language switch: set_language at /i18n/setlang/ (a POST that sets the language cookie).
    path("i18n/", include("django.conf.urls.i18n")),
]

handler400 = core_views.bad_request
handler403 = core_views.permission_denied
handler404 = core_views.page_not_found
handler500 = core_views.server_error
