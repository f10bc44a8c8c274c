"""The one FilterSet base of every list (API and portal): integer filters that refuse what the
database cannot hold.

django-filter's NumberFilter hands the database a Decimal of any size, so `?pool_id=99999999999999999999`
reached SQLite or PostgreSQL and failed there (a 500). Here every integer filter, and every filter
on a related object (by its integer id), accepts only ASCII digits (an optional sign) within a 64-bit
signed integer, and a boolean filter only `true` or `false`; anything else is a 400 naming the
parameter. An empty value means no filter, as the schema says (allowEmptyValue).
"""

import re

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django.db import models
from django_filters.rest_framework import DjangoFilterBackend
from django_filters.rest_framework import FilterSet as RestFilterSet
from django_filters.rest_framework.filterset import FILTER_FOR_DBFIELD_DEFAULTS
from drf_spectacular.utils import extend_schema_field

INTEGER_MIN, INTEGER_MAX = -(2**63), 2**63 - 1
ASCII_INTEGER = re.compile(r"[+-]?[0-9]+")


def parse_integer(value, *, minimum: int = INTEGER_MIN, maximum: int = INTEGER_MAX) -> int:
    """An integer written in ASCII digits within [minimum, maximum], or a ValidationError saying why.
    (int() alone also takes other scripts' digits and any length.)"""
    text = str(value).strip()
    if not ASCII_INTEGER.fullmatch(text):
        raise ValidationError("Enter a whole number in ASCII digits.", code="invalid")
    if len(text.lstrip("+-")) > 20:
        raise ValidationError(f"Enter a whole number between {minimum} and {maximum}.", code="out_of_range")
    number = int(text)
    if not minimum <= number <= maximum:
        raise ValidationError(f"Enter a whole number between {minimum} and {maximum}.", code="out_of_range")
    return number


class IntegerFormField(forms.IntegerField):
    def to_python(self, value):
        if value in self.empty_values or not str(value).strip():
            return None
        return parse_integer(value)


@extend_schema_field({"type": "integer", "minimum": INTEGER_MIN, "maximum": INTEGER_MAX})
class IntegerFilter(django_filters.NumberFilter):
    field_class = IntegerFormField


class BooleanFormField(forms.Field):
    """`true` or `false` (any case); anything else is a 400 (django-filter would ignore it)."""

    def to_python(self, value):
        if value in self.empty_values or not str(value).strip():
            return None
        text = str(value).strip().lower()
        if text not in ("true", "false"):
            raise ValidationError("Enter true or false.", code="invalid")
        return text == "true"


class BooleanFilter(django_filters.BooleanFilter):
    field_class = BooleanFormField


class MultipleChoiceFormField(forms.MultipleChoiceField):
    """Several choices; empty values among them mean nothing (`?role=&role=gpu` is `?role=gpu`)."""

    def to_python(self, value):
        return [item for item in super().to_python(value) if item.strip()]


class MultipleChoiceFilter(django_filters.MultipleChoiceFilter):
    field_class = MultipleChoiceFormField


FILTER_DEFAULTS = {
    **FILTER_FOR_DBFIELD_DEFAULTS,
    **{field: {"filter_class": IntegerFilter}
       for field in (models.AutoField, models.BigAutoField, models.SmallAutoField, models.IntegerField,
                     models.BigIntegerField, models.SmallIntegerField, models.PositiveIntegerField,
                     models.PositiveBigIntegerField, models.PositiveSmallIntegerField)},
    models.BooleanField: {"filter_class": BooleanFilter},
    # A related object by its id (every model here has an integer key): an id that names nothing
    # matches nothing, as any other filter value would.
    models.ForeignKey: {"filter_class": IntegerFilter},
    models.OneToOneField: {"filter_class": IntegerFilter},
}


class FilterSet(RestFilterSet):
    FILTER_DEFAULTS = FILTER_DEFAULTS


class FilterBackend(DjangoFilterBackend):
    """DRF's filter backend with the FilterSet above as the base of `filterset_fields` lists."""

    filterset_base = FilterSet
