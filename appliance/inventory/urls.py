from django.urls import path

from . import views

app_name = "inventory"
urlpatterns = [
    path("nodes/", views.NodeListView.as_view(), name="node-list"),
    path("nodes/<str:name>/", views.NodeDetailView.as_view(), name="node-detail"),
    path("nodes/<str:name>/transition/", views.NodeTransitionView.as_view(), name="node-transition"),
    path("site/import/", views.SiteImportView.as_view(), name="site-import"),
    path("credentials/", views.CredentialListView.as_view(), name="credential-list"),
    path("credentials/<str:name>/", views.CredentialUpdateView.as_view(), name="credential-update"),
]
