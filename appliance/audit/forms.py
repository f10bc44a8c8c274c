from django import forms
from django.utils.translation import gettext_lazy as _

from .downloads import EXPORT_FORMATS


class ExportForm(forms.Form):
    """The format of an export; what it holds is the audit log's filter (queries.AuditRecordFilter),
    carried from the log page and shown beside this field."""

    format = forms.ChoiceField(label=_("Format"), choices=EXPORT_FORMATS, initial="jsonl")
