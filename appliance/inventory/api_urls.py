from django.urls import path
from rest_framework.routers import APIRootView, DefaultRouter

from . import api


class InventoryRootView(APIRootView):
    """The inventory API's endpoints."""

    capability = "inventory.view"


router = DefaultRouter()
router.APIRootView = InventoryRootView
router.root_view_name = "inventory-api-root"  # unique: /api/v1/ links to each app's root
router.register("appliances", api.ApplianceViewSet, basename="inventory-appliance")
router.register("platforms", api.PlatformViewSet, basename="inventory-platform")
router.register("nodes", api.NodeViewSet, basename="inventory-node")
router.register("gpus", api.GPUViewSet, basename="inventory-gpu")
router.register("hcas", api.HCAViewSet, basename="inventory-hca")
router.register("hca-ports", api.HCAPortViewSet, basename="inventory-hcaport")
router.register("switches", api.SwitchViewSet, basename="inventory-switch")
router.register("networks", api.NetworkViewSet, basename="inventory-network")
router.register("filesystems", api.FilesystemViewSet, basename="inventory-filesystem")
router.register("pools", api.PoolViewSet, basename="inventory-pool")
router.register("credentials", api.CredentialViewSet, basename="inventory-credential")

urlpatterns = [
    path("site/import/", api.SiteImportView.as_view(), name="inventory-site-import"),
    path("site/validate/", api.SiteValidateView.as_view(), name="inventory-site-validate"),
    *router.urls,
]
