from django.urls import path

from . import findings_views

urlpatterns = [
    path("recommendations/", findings_views.RecommendationListView.as_view(), name="recommendations"),
    path("recommendations/refresh/", findings_views.RefreshView.as_view(), name="refresh-findings"),
    path("recommendations/<int:pk>/", findings_views.RecommendationView.as_view(), name="recommendation"),
    path("recommendations/<int:pk>/accept/", findings_views.DecisionView.as_view(decision="accept"),
         name="recommendation-accept"),
    path("recommendations/<int:pk>/dismiss/", findings_views.DecisionView.as_view(decision="dismiss"),
         name="recommendation-dismiss"),
]
