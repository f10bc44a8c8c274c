"""Portal pages of the model lifecycle under /models/ (views.py).

A model's name is matched with the registry's own pattern (a converter), so /models/<name>/ takes only
names the registry could have made. The fixed pages (approvals, deployments, requests) come first."""

from django.urls import path, register_converter

from . import views


class ModelNameConverter:
    regex = r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class CardFormatConverter:
    regex = r"html|md|json"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(ModelNameConverter, "modelname")
register_converter(CardFormatConverter, "cardformat")

app_name = "lifecycle"
urlpatterns = [
    path("", views.ModelListView.as_view(), name="models"),
    path("approvals/", views.ApprovalsView.as_view(), name="approvals"),
    path("requests/<int:pk>/approve/", views.ApproveView.as_view(), name="request-approve"),
    path("requests/<int:pk>/reject/", views.RejectView.as_view(), name="request-reject"),
    path("requests/<int:pk>/cancel/", views.CancelView.as_view(), name="request-cancel"),
    path("deployments/", views.DeploymentsView.as_view(), name="deployments"),
    path("deployments/rollback/", views.RollbackView.as_view(), name="deployment-rollback"),
    path("deployments/<int:pk>/stop/", views.StopView.as_view(), name="deployment-stop"),
    path("<modelname:name>/", views.ModelDetailView.as_view(), name="model"),
    path("<modelname:name>/aliases/", views.AliasSetView.as_view(), name="alias-set"),
    path("<modelname:name>/aliases/delete/", views.AliasDeleteView.as_view(), name="alias-delete"),
    path("<modelname:name>/versions/<int:number>/", views.VersionDetailView.as_view(), name="version"),
    path("<modelname:name>/versions/<int:number>/verify/", views.VerifyView.as_view(), name="version-verify"),
    path("<modelname:name>/versions/<int:number>/transition/", views.TransitionView.as_view(),
         name="version-transition"),
    path("<modelname:name>/versions/<int:number>/request/", views.RequestCreateView.as_view(),
         name="version-request"),
    path("<modelname:name>/versions/<int:number>/evaluations/", views.EvaluationCreateView.as_view(),
         name="version-evaluation"),
    path("<modelname:name>/versions/<int:number>/card.<cardformat:fmt>", views.CardView.as_view(),
         name="version-card"),
]
