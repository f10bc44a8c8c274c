from django.urls import path

from . import views

app_name = "partitioning"
urlpatterns = [
    path("", views.LayoutView.as_view(), name="layout"),
    path("plans/", views.PlanListView.as_view(), name="plans"),
    path("plans/new/", views.PlanEditorView.as_view(), name="plan-new"),
    path("plans/<int:number>/", views.PlanDetailView.as_view(), name="plan"),
    path("plans/<int:number>/apply/", views.ApplyView.as_view(), name="plan-apply"),
    path("rollback/", views.RollbackView.as_view(), name="rollback"),
    path("advisor/", views.AdvisorView.as_view(), name="advisor"),
]
