from django.urls import path  # noqa: F401

from . import findings_api_urls

urlpatterns = [] + findings_api_urls.urlpatterns
