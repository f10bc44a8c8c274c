from django.urls import path

from . import views, views_fabric

app_name = "inventory"
urlpatterns = [
    path("nodes/", views.NodeListView.as_view(), name="node-list"),
    path("nodes/<str:name>/", views.NodeDetailView.as_view(), name="node-detail"),
    path("nodes/<str:name>/transition/", views.NodeTransitionView.as_view(), name="node-transition"),
    path("site/import/", views.SiteImportView.as_view(), name="site-import"),
    path("fabric/", views_fabric.FabricView.as_view(), name="fabric"),
    path("storage/", views_fabric.StorageView.as_view(), name="storage"),
    path("pools/", views_fabric.PoolsView.as_view(), name="pools"),
    path("pools/<slug:appliance>/files/<str:filename>", views_fabric.PoolConfigDownloadView.as_view(),
         name="pool-config"),
]
