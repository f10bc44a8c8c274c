"""Utilization traces imported from other systems (a site's history before it moves, or a public cluster
trace), kept beside the appliance's own telemetry and analyzed the same way.

A `Trace` is one import: its file, how its columns were read and what was found (rows, entities, time
span, whether its time stamps were absolute and its values fractions). Its `Sample`s are the rows, with the
utilization always in percent (0-100) and the time as seconds from the trace's first sample, so that a
trace with relative time stamps and one with absolute ones are read the same way. Samples are data, not
actions: the import (and a replacement) is audited as one event, not row by row.
"""

from django.db import models
from django.utils.translation import gettext_lazy as _


class Trace(models.Model):
    class Format(models.TextChoices):
        CSV = "csv", "CSV"
        PARQUET = "parquet", "Parquet"

    class Compression(models.TextChoices):
        NONE = "", _("none")
        GZIP = "gzip", "gzip"
        TAR_GZIP = "tar.gz", _("tar.gz (one CSV)")

    class TimeKind(models.TextChoices):
        ABSOLUTE = "absolute", _("absolute (ISO 8601 or epoch seconds)")
        RELATIVE = "relative", _("relative (seconds from the trace's start)")

    class Scale(models.TextChoices):
        FRACTION = "fraction", _("fraction (0-1)")
        PERCENT = "percent", _("percent (0-100)")

    name = models.CharField(max_length=64, unique=True)
    source_file = models.CharField(max_length=255, help_text=_("the imported file's name (no directory)"))
    format = models.CharField(max_length=16, choices=Format.choices)
    compression = models.CharField(max_length=16, choices=Compression.choices, blank=True)
    columns = models.JSONField(help_text=_("column mapping: value, time, entity and the optional memory and job"))
    time_kind = models.CharField(max_length=16, choices=TimeKind.choices)
    scale = models.CharField(max_length=16, choices=Scale.choices, help_text=_("how the value column was read"))
    rows = models.PositiveBigIntegerField()
    entities = models.PositiveIntegerField()
    started_at = models.DateTimeField(null=True, blank=True,
                                      help_text=_("the first sample's time; empty for relative time stamps"))
    start_s = models.FloatField(help_text=_("the first sample's time stamp as given, in seconds "
                                            "(epoch seconds when absolute)"))
    duration_s = models.FloatField(help_text=_("from the first sample to the last, in seconds"))
    imported_by = models.CharField(max_length=150, blank=True)
    imported_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]
        verbose_name = _("imported trace")

    def __str__(self):
        return self.name


class RowIdField(models.BigAutoField):
    """A BigAutoField that on SQLite is the table's rowid without AUTOINCREMENT: the bookkeeping that keeps
    deleted ids from coming back costs a third of a million-row import, and nothing refers to a sample by id."""

    def db_type_suffix(self, connection):
        return None if connection.vendor == "sqlite" else super().db_type_suffix(connection)


class Sample(models.Model):
    """One row of a trace: an entity (GPU or container) at a time, its utilization and optionally its
    memory and job."""

    id = RowIdField(primary_key=True)
    # No foreign key constraint in the database: PostgreSQL would check it by a trigger per row (most of a
    # million-row COPY's time). Samples are only written by the import, in the transaction that creates their
    # trace, and deleted with it.
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="samples", db_constraint=False)
    entity = models.CharField(max_length=200)
    offset_s = models.FloatField(help_text=_("seconds from the trace's first sample"))
    value = models.FloatField(help_text=_("utilization in percent (0-100)"))
    memory = models.FloatField(null=True, blank=True, help_text=_("memory as the trace gave it (its unit)"))
    job = models.CharField(max_length=200, blank=True)

    class Meta:
        verbose_name = _("trace sample")

    def __str__(self):
        return f"{self.entity} +{self.offset_s:g} s"
