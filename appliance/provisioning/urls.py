from django.urls import path

from . import views

app_name = "provisioning"
urlpatterns = [
    path("", views.ProvisioningIndexView.as_view(), name="index"),
    path("runs/<int:pk>/", views.RunDetailView.as_view(), name="run"),
    path("runs/<int:pk>/cancel/", views.RunCancelView.as_view(), name="run-cancel"),
    path("stages/<int:pk>/output/", views.StageOutputView.as_view(), name="stage-output"),
    path("acceptance/", views.AcceptanceReportView.as_view(), name="acceptance"),
    path("acceptance/export.<str:form>", views.AcceptanceExportView.as_view(), name="acceptance-export"),
]
