from django.urls import path  # noqa: F401

from . import findings_urls

app_name = "analytics"
urlpatterns = [] + findings_urls.urlpatterns
