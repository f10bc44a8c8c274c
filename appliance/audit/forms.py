from django import forms

from .downloads import EXPORT_FORMATS


class ExportForm(forms.Form):
    format = forms.ChoiceField(choices=EXPORT_FORMATS, initial="jsonl")
    since = forms.DateTimeField(required=False, label="Since (UTC)",
                                widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}))
    until = forms.DateTimeField(required=False, label="Until (UTC, not included)",
                                widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}))

    def clean(self):
        cleaned = super().clean()
        since, until = cleaned.get("since"), cleaned.get("until")
        if since and until and until <= since:
            self.add_error("until", "must be later than 'since'")
        return cleaned
