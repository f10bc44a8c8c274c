from django.urls import path

from . import views

app_name = "audit"
urlpatterns = [
    path("", views.LogView.as_view(), name="log"),
    path("records/<int:sequence>/", views.RecordView.as_view(), name="record"),
    path("records/<int:sequence>/verify/", views.RecordVerifyView.as_view(), name="record-verify"),
    path("users/<str:username>/", views.TimelineView.as_view(), name="timeline"),
    path("export/", views.ExportView.as_view(), name="export"),
    path("catalogue/", views.CatalogueView.as_view(), name="catalogue"),
]
