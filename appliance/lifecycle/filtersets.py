"""Filters of the registry's lists (API; the portal may share them): models by stage of any of their versions,
risk class, owner and tag; versions by model, stage, verification, format and training job; requests by
state and model; deployments by state, service and model."""

import django_filters
from django.db.models import Exists, OuterRef

from appliance.core.filters import FilterSet, MultipleChoiceFilter

from .models import (
    ArtifactFormat,
    Deployment,
    ModelVersion,
    PromotionRequest,
    RegisteredModel,
    RiskClass,
    Stage,
    Verification,
)


class ModelFilterSet(FilterSet):
    risk_class = MultipleChoiceFilter(choices=RiskClass.choices)
    owner = django_filters.CharFilter(field_name="owner__username", label="Owner (username)")
    stage = MultipleChoiceFilter(choices=Stage.choices, method="filter_stage",
                                 label="Models with a version in one of these stages")
    tag = django_filters.CharFilter(method="filter_tag", label="Models with this tag (its name)")

    class Meta:
        model = RegisteredModel
        fields = ["name", "risk_class", "owner", "stage", "tag"]

    def filter_stage(self, queryset, name, value):
        if not value:
            return queryset
        return queryset.filter(Exists(ModelVersion.objects.filter(model=OuterRef("pk"), stage__in=value)))

    def filter_tag(self, queryset, name, value):
        return queryset.filter(tags__has_key=value) if value else queryset


class VersionFilterSet(FilterSet):
    model = django_filters.CharFilter(field_name="model__name", label="Model (name)")
    stage = MultipleChoiceFilter(choices=Stage.choices)
    verification = MultipleChoiceFilter(choices=Verification.choices)
    # Not "format": DRF reads ?format= as the renderer to answer with.
    artifact_format = MultipleChoiceFilter(field_name="format", choices=ArtifactFormat.choices,
                                           label="Format of the files")

    class Meta:
        model = ModelVersion
        fields = ["model", "number", "stage", "verification", "artifact_format", "training_job"]


class RequestFilterSet(FilterSet):
    state = MultipleChoiceFilter(choices=PromotionRequest.State.choices)
    model = django_filters.CharFilter(field_name="version__model__name", label="Model (name)")
    requested_by = django_filters.CharFilter(field_name="requested_by_username", label="Requester (username)")

    class Meta:
        model = PromotionRequest
        fields = ["state", "model", "requested_by", "target_stage"]


class DeploymentFilterSet(FilterSet):
    state = MultipleChoiceFilter(choices=Deployment.State.choices)
    model = django_filters.CharFilter(field_name="version__model__name", label="Model (name)")

    class Meta:
        model = Deployment
        fields = ["name", "state", "model", "runtime", "pool"]
