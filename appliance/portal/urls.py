from django.urls import path

from . import views, views_fabric, views_search

app_name = "portal"
urlpatterns = [
    path("", views.OverviewView.as_view(), name="overview"),
    path("search/", views_search.SearchView.as_view(), name="search"),
    # Pages over the inventory that show what the stages render from it (mount options, rail
    # affinity, Slurm and Kubernetes configs): they live here, above both inventory and partitioning.
    path("inventory/fabric/", views_fabric.FabricView.as_view(), name="fabric"),
    path("inventory/storage/", views_fabric.StorageView.as_view(), name="storage"),
    path("inventory/pools/", views_fabric.PoolsView.as_view(), name="pools"),
    path("inventory/pools/<slug:appliance>/files/<str:filename>", views_fabric.PoolConfigDownloadView.as_view(),
         name="pool-config"),
]
