from django.urls import path  # noqa: F401

# The partitioning API's endpoints (the portal helper fills this list: plans, preview, apply, size, layout).
urlpatterns: list = []
