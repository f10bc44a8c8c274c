"""The model versions a training job made, for the job pages (telemetry.jobinfo.VERSIONS): the lineage
links back from a job to what it trained, as the version page links to its job."""

from django.urls import reverse

from appliance.core.roles import can

from .models import ModelVersion

MAX_VERSIONS = 20


def versions_of(job: str, user=None) -> list[dict]:
    if not job or (user is not None and not can(user, "models.view")):
        return []
    rows = (ModelVersion.objects.filter(training_job=job).select_related("model")
            .order_by("model__name", "number")[:MAX_VERSIONS])
    return [{"label": f"{version.model.name} v{version.number}",
             "url": reverse("lifecycle:version", args=[version.model.name, version.number])} for version in rows]
