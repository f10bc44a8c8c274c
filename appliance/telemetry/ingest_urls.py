"""/telemetry/ingest/: the collectors' write endpoint (InfluxDB v2's write API, /health, /ready, /ping; see ingest_views)."""

from django.urls import path

from . import ingest_views

app_name = "telemetry-ingest"

urlpatterns = [
    path("api/v2/write", ingest_views.write, name="ingest-write"),
    path("health", ingest_views.health, name="ingest-health"),
    path("ping", ingest_views.ping, name="ingest-ping"),
    path("ready", ingest_views.ready, name="ingest-ready"),
]
