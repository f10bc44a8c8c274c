"""The one FilterSet base of every list (API and portal): integer filters that refuse what the
database cannot hold.

django-filter's NumberFilter hands the database a Decimal of any size, so `?pool_id=99999999999999999999`
reached SQLite or PostgreSQL and failed there (a 500). Here every integer filter, and every filter
on a related object by its integer key, accepts only ASCII digits (an optional sign) within a 64-bit
signed integer, and says so in a 400 naming the parameter.
"""

import re

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django.db import models
from django_filters import fields as filter_fields
from django_filters.rest_framework import DjangoFilterBackend
from django_filters.rest_framework import FilterSet as RestFilterSet
from django_filters.rest_framework.filterset import FILTER_FOR_DBFIELD_DEFAULTS

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


class IntegerFilter(django_filters.NumberFilter):
    field_class = IntegerFormField


def _integer_key(model, to_field_name: str | None) -> bool:
    field = model._meta.get_field(to_field_name) if to_field_name else model._meta.pk
    return isinstance(field, models.IntegerField | models.AutoField)


class ModelChoiceFormField(filter_fields.ModelChoiceField):
    """A related object by its key: an integer key is checked before the database sees it."""

    def to_python(self, value):
        is_null_choice = self.null_label is not None and value == self.null_value
        if value not in self.empty_values and not is_null_choice \
                and _integer_key(self.queryset.model, self.to_field_name):
            parse_integer(value)
        return super().to_python(value)


class ModelChoiceFilter(django_filters.ModelChoiceFilter):
    field_class = ModelChoiceFormField


FILTER_DEFAULTS = {
    **FILTER_FOR_DBFIELD_DEFAULTS,
    **{field: {"filter_class": IntegerFilter}
       for field in (models.AutoField, models.BigAutoField, models.SmallAutoField, models.IntegerField,
                     models.BigIntegerField, models.SmallIntegerField, models.PositiveIntegerField,
                     models.PositiveBigIntegerField, models.PositiveSmallIntegerField)},
    models.ForeignKey: {**FILTER_FOR_DBFIELD_DEFAULTS[models.ForeignKey], "filter_class": ModelChoiceFilter},
    models.OneToOneField: {**FILTER_FOR_DBFIELD_DEFAULTS[models.OneToOneField], "filter_class": ModelChoiceFilter},
}


class FilterSet(RestFilterSet):
    FILTER_DEFAULTS = FILTER_DEFAULTS


class FilterBackend(DjangoFilterBackend):
    """DRF's filter backend with the FilterSet above as the base of `filterset_fields` lists."""

    filterset_base = FilterSet
