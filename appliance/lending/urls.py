from django.urls import path

from . import views

app_name = "lending"
urlpatterns = [
    path("", views.PlanListView.as_view(), name="plans"),
    path("propose/", views.ProposeView.as_view(), name="propose"),
    path("policies/<int:pool>/", views.PolicyView.as_view(), name="policy"),
    path("plans/<int:pk>/", views.PlanDetailView.as_view(), name="plan"),
    path("plans/<int:pk>/approve/", views.PlanActionView.as_view(action="approve"), name="approve"),
    path("plans/<int:pk>/reject/", views.PlanActionView.as_view(action="reject"), name="reject"),
    path("plans/<int:pk>/rollback/", views.PlanActionView.as_view(action="rollback"), name="rollback"),
    path("plans/<int:pk>/reclaim/", views.ReclaimView.as_view(), name="reclaim"),
]
