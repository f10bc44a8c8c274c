"""Reading the audit log, for the portal, the API and the CLI alike: one set of filters (the log
page, the records API and every export read them through `AuditRecordFilter`, so what an auditor
sees filtered is what is exported), keyset paging that stays fast on millions of records, and the
records that reads of the log itself leave behind.

Time filters are a half-open window: since <= timestamp < until.

Filters on actor, event, target, request id, time and the rare outcomes (denied, failure) use an
index each (see AuditRecord.Meta); the others narrow the newest-first walk of the primary key
(sequence), which paging uses instead of counting and skipping rows.
"""

from dataclasses import dataclass
from datetime import UTC, datetime

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _
from django_filters.fields import IsoDateTimeField

from appliance import audit
from appliance.core.filters import FilterSet, IntegerFilter

from . import catalogue
from .models import AuditRecord, Channel, Outcome

COUNT_CAP = 10_000
PAGE_SIZE = 50


def categories() -> list[str]:
    return sorted({event.category for event in catalogue.CATALOGUE.values()})


class UtcDateTimeField(IsoDateTimeField):
    """An ISO 8601 time (UTC when it names no offset) that exists in UTC: 0001-01-01T00:00+05:00
    does not, and is refused by name instead of overflowing later (a 500)."""

    def to_python(self, value):
        try:
            moment = super().to_python(value)
            return None if moment is None else moment.astimezone(UTC)
        except OverflowError:
            raise ValidationError(_("Enter a time between the years 1 and 9999 in UTC."), code="overflow") from None


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcDateTimeField


class AuditRecordFilter(FilterSet):
    actor = django_filters.CharFilter(field_name="actor_username", label=_("Actor (username)"))
    actor_id = IntegerFilter(field_name="actor_id", label=_("Actor id"))
    # An event name, or a prefix ending in "." or "*" (auth.*): the event index serves both.
    event = django_filters.CharFilter(method="filter_event", label=_("Event"), widget=forms.TextInput(
        attrs={"list": "audit-event-names", "placeholder": _("auth.login.failure or auth.*")}))
    action = django_filters.CharFilter(field_name="action", label=_("Action"))
    category = django_filters.ChoiceFilter(field_name="category", label=_("Category"),
                                           choices=[(c, c) for c in categories()])
    target_type = django_filters.CharFilter(field_name="target_type", label=_("Target type"))
    target_id = django_filters.CharFilter(field_name="target_id", label=_("Target id"))
    target = django_filters.CharFilter(field_name="target_name", lookup_expr="icontains", label=_("Target name"))
    outcome = django_filters.ChoiceFilter(field_name="outcome", choices=Outcome.choices, label=_("Outcome"))
    channel = django_filters.ChoiceFilter(field_name="channel", choices=Channel.choices, label=_("Channel"))
    request_id = django_filters.CharFilter(field_name="request_id", label=_("Request id"))
    since = UtcDateTimeFilter(field_name="timestamp", lookup_expr="gte", label=_("Since (UTC)"),
                              widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}))
    until = UtcDateTimeFilter(field_name="timestamp", lookup_expr="lt", label=_("Until (UTC, not included)"),
                              widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}))

    class Meta:
        model = AuditRecord
        fields: list[str] = []

    def filter_event(self, queryset, name, value):
        value = value.strip()
        if value.endswith("*"):
            return queryset.filter(event__startswith=value[:-1])
        if value.endswith("."):
            return queryset.filter(event__startswith=value)
        return queryset.filter(event=value)


def active_filters(params, filterset_class=AuditRecordFilter) -> dict[str, str]:
    """The filters a request actually uses (non-empty values of known filter names)."""
    names = filterset_class.base_filters
    return {name: str(params.get(name)).strip() for name in names
            if name in params and str(params.get(name)).strip()}


TIME_FILTERS = frozenset({"since", "until"})


class FilterError(ValueError):
    """Filter values the log cannot apply: {parameter: [messages]}, each naming its parameter."""

    def __init__(self, errors: dict[str, list[str]]):
        self.errors = errors
        super().__init__("; ".join(f"{name}: {' '.join(messages)}" for name, messages in errors.items()))


@dataclass(frozen=True)
class AuditSelection:
    """The records a filter selects, and the filter as applied ({parameter: exact value}, times as
    UTC ISO 8601 with microseconds): what an export's manifest states."""

    filters: dict
    queryset: QuerySet

    @property
    def is_time_window(self) -> bool:
        """Whether only the time filters are used: such a selection is a contiguous run of the chain."""
        return set(self.filters) <= TIME_FILTERS


def _stated(value):
    if isinstance(value, datetime):
        # chain's timestamp form, four-digit year included (strftime drops the zeros of year 1).
        return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    return value


def select_records(params, queryset=None) -> AuditSelection:
    """The one parser of audit filters for exports (portal, API, CLI): `params` maps filter names to
    their text values, as a query string would. Unknown names and bad values raise FilterError."""
    names = AuditRecordFilter.base_filters
    unknown = sorted(str(name) for name in params if name not in names)
    if unknown:
        raise FilterError({name: [f"not a filter of the audit log (the filters are {', '.join(names)})"]
                           for name in unknown})
    filterset = AuditRecordFilter(params, queryset=AuditRecord.objects.all() if queryset is None else queryset)
    if not filterset.is_valid():
        raise FilterError({name: [str(message) for message in messages]
                           for name, messages in filterset.errors.items()})
    used = active_filters(params)
    cleaned = filterset.form.cleaned_data
    # A list may answer an empty window with no records; an export of one is a mistake to name.
    if cleaned.get("since") and cleaned.get("until") and cleaned["until"] <= cleaned["since"]:
        raise FilterError({"until": [str(_("must be later than 'since'"))]})
    stated = {name: _stated(cleaned[name]) if cleaned.get(name) is not None else used[name] for name in used}
    if "event" in stated:
        stated["event"] = str(stated["event"]).strip()
    return AuditSelection(filters=stated, queryset=filterset.qs)


@dataclass
class KeysetPage:
    records: list
    newer_than: int | None  # pass as ?after= to see the newer page
    older_than: int | None  # pass as ?before= to see the older page
    total: int
    total_is_capped: bool


def _int_param(value) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number >= 0 else None


def keyset_page(queryset, params, size: int = PAGE_SIZE) -> KeysetPage:
    """Newest first; ?before=N shows the page below sequence N, ?after=N the page above it."""
    before, after = _int_param(params.get("before")), _int_param(params.get("after"))
    queryset = queryset.order_by()
    if after is not None:
        rows = list(queryset.filter(sequence__gt=after).order_by("sequence")[:size + 1])
        has_newer = len(rows) > size
        rows = rows[:size][::-1]
        has_older = bool(rows) and queryset.filter(sequence__lt=rows[-1].sequence).exists()
    else:
        scoped = queryset.filter(sequence__lt=before) if before is not None else queryset
        rows = list(scoped.order_by("-sequence")[:size + 1])
        has_older = len(rows) > size
        rows = rows[:size]
        has_newer = before is not None and bool(rows) and queryset.filter(sequence__gt=rows[0].sequence).exists()
    # A bounded count: "10,000+" is all a reader needs, and it never scans the whole table.
    total = queryset[:COUNT_CAP + 1].count()
    return KeysetPage(
        records=rows,
        newer_than=rows[0].sequence if has_newer and rows else None,
        older_than=rows[-1].sequence if has_older and rows else None,
        total=min(total, COUNT_CAP), total_is_capped=total > COUNT_CAP,
    )


def record_read(view: str, filters: dict | None = None, target=None, **details) -> None:
    """Reads of the log are themselves evidence: audit.search when filtered, audit.view otherwise."""
    event = "audit.search" if filters else "audit.view"
    payload = {"view": view, **details}
    if filters:
        payload["filters"] = filters
    if target is not None:
        audit.record(event, target=target, details=payload)
    else:
        audit.record(event, details=payload)
