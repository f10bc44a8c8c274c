from django.urls import path
from rest_framework.routers import APIRootView, DefaultRouter

from . import api


class AccountsRootView(APIRootView):
    """The accounts API's endpoints."""

    capability = "accounts.view"


router = DefaultRouter()
router.APIRootView = AccountsRootView
router.root_view_name = "accounts-api-root"  # unique: /api/v1/ links to each app's root
router.register("users", api.UserViewSet, basename="accounts-user")
router.register("tokens", api.ApiTokenViewSet, basename="accounts-token-item")

urlpatterns = [
    path("me/", api.MeView.as_view(), name="accounts-me"),
    path("me/password/", api.OwnPasswordView.as_view(), name="accounts-me-password"),
    path("token/", api.TokenView.as_view(), name="accounts-token"),
    *router.urls,
]
