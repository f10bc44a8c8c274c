"""Forms of the model lifecycle's pages. Each field has a type, a length and, where it names something (a
model, an alias, a service, a tag), the registry's own pattern; what only the registry can decide (a
transition the table allows, a four-eyes approval, an intact model) the services refuse, by the field."""

import re

from django import forms
from django.core.validators import RegexValidator
from django.utils.translation import gettext_lazy

from .models import Deployment, Stage

# The registry's patterns (services.NAME / services.ALIAS), repeated here so that a form refuses a bad value
# before any service is called; the services check them again.
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
ALIAS_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,63}\Z")
SERVICE_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")
TAG_FILTER = re.compile(r"^[A-Za-z0-9_.:/-]{1,64}(=[^\x00-\x1f]{0,200})?\Z")
REASON_MAX = 1000


class ModelSearchForm(forms.Form):
    """GET /models/: a name (or description) to look for, a tag (key, or key=value), a stage that one of the
    model's versions holds."""

    q = forms.CharField(label=gettext_lazy("Name"), max_length=100, required=False)
    tag = forms.CharField(label=gettext_lazy("Tag"), max_length=265, required=False, validators=[RegexValidator(
        TAG_FILTER, gettext_lazy("tag: a key (letters, digits, _ . : / -), or key=value"))],
        help_text=gettext_lazy("key, or key=value"))
    stage = forms.ChoiceField(label=gettext_lazy("Stage"), required=False,
                              choices=[("", gettext_lazy("any"))] + list(Stage.choices))


class AliasForm(forms.Form):
    alias = forms.CharField(label=gettext_lazy("Alias"), max_length=64, validators=[RegexValidator(
        ALIAS_NAME, gettext_lazy("alias: lower-case letters, digits, '_' and '-', starting with a letter"))])
    version = forms.IntegerField(label=gettext_lazy("Version"), min_value=1, max_value=2_000_000_000)


class AliasDeleteForm(forms.Form):
    alias = forms.CharField(max_length=64, validators=[RegexValidator(
        ALIAS_NAME, gettext_lazy("alias: lower-case letters, digits, '_' and '-', starting with a letter"))])


class TransitionForm(forms.Form):
    stage = forms.ChoiceField(label=gettext_lazy("To stage"), choices=Stage.choices)
    reason = forms.CharField(label=gettext_lazy("Reason"), max_length=REASON_MAX, required=False)


class PromotionRequestForm(forms.Form):
    """A request for a stage that needs a second person's approval, with the evaluations as evidence."""

    stage = forms.ChoiceField(label=gettext_lazy("To stage"), choices=[(Stage.PRODUCTION, Stage.PRODUCTION.label)])
    reason = forms.CharField(label=gettext_lazy("Reason"), max_length=REASON_MAX,
                             widget=forms.Textarea(attrs={"rows": 2}))
    evidence = forms.MultipleChoiceField(label=gettext_lazy("Evidence (evaluations)"), required=False,
                                         widget=forms.CheckboxSelectMultiple)

    def __init__(self, *args, evaluations=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["evidence"].choices = [(str(e.pk), e.name) for e in evaluations]


class DecisionForm(forms.Form):
    reason = forms.CharField(label=gettext_lazy("Reason"), max_length=REASON_MAX, required=False)


class RejectForm(forms.Form):
    reason = forms.CharField(label=gettext_lazy("Reason"), max_length=REASON_MAX)


class EvaluationForm(forms.Form):
    """An evaluation typed into the page: a name, metrics as name=number lines, whether it passed."""

    name = forms.CharField(label=gettext_lazy("Name"), max_length=100, validators=[RegexValidator(
        re.compile(r"^[^\x00-\x1f]{1,100}$"), gettext_lazy("name: one line of text"))])
    metrics = forms.CharField(label=gettext_lazy("Metrics"), max_length=4000, required=False,
                              widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
                              help_text=gettext_lazy("one per line: name=number"))
    passed = forms.NullBooleanField(label=gettext_lazy("Passed"), required=False, widget=forms.Select(choices=[
        ("unknown", gettext_lazy("not said")), ("true", gettext_lazy("passed")), ("false", gettext_lazy("failed"))]))
    notes = forms.CharField(label=gettext_lazy("Notes"), max_length=2000, required=False)

    def clean_metrics(self) -> dict:
        metrics = {}
        for number, line in enumerate(self.cleaned_data.get("metrics", "").splitlines(), start=1):
            line = line.strip()
            if not line:
                continue
            key, sep, value = line.partition("=")
            key = key.strip()
            if not sep or not re.fullmatch(r"[A-Za-z0-9_.:/-]{1,100}", key):
                raise forms.ValidationError(gettext_lazy("metrics, line %(line)s: expected name=number"),
                                            params={"line": number})
            try:
                metrics[key] = float(value)
            except ValueError:
                raise forms.ValidationError(gettext_lazy("metrics, line %(line)s: %(value)s is not a number"),
                                            params={"line": number, "value": value.strip()[:40]}) from None
            if len(metrics) > 100:
                raise forms.ValidationError(gettext_lazy("metrics: at most 100"))
        return metrics


class DeployForm(forms.Form):
    """Deploy a production version. `version` is "name/number", one of the production versions offered."""

    version = forms.ChoiceField(label=gettext_lazy("Production version"))
    runtime = forms.ChoiceField(label=gettext_lazy("Runtime"), choices=Deployment.Runtime.choices,
                                initial=Deployment.Runtime.VLLM)
    name = forms.CharField(label=gettext_lazy("Service name"), max_length=63, required=False, validators=[
        RegexValidator(SERVICE_NAME, gettext_lazy("name: a DNS label (lower-case letters, digits and '-')"))],
        help_text=gettext_lazy("empty: made from the model's name"))
    context = forms.IntegerField(label=gettext_lazy("Context (tokens)"), min_value=1, max_value=10_000_000,
                                 initial=4096)
    concurrency = forms.IntegerField(label=gettext_lazy("Concurrent sequences"), min_value=1, max_value=100_000,
                                     initial=8)

    def __init__(self, *args, versions=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["version"].choices = [(f"{v.model.name}/{v.number}", f"{v.model.name} v{v.number}")
                                          for v in versions]


class RollbackForm(forms.Form):
    service = forms.CharField(label=gettext_lazy("Service"), max_length=63, validators=[
        RegexValidator(SERVICE_NAME, gettext_lazy("service: a DNS label (lower-case letters, digits and '-')"))])
    reason = forms.CharField(label=gettext_lazy("Reason"), max_length=REASON_MAX)


class StopForm(forms.Form):
    reason = forms.CharField(label=gettext_lazy("Reason"), max_length=REASON_MAX)


class StateAtForm(forms.Form):
    """GET ?at= on a model's page: the stages and aliases as they stood then (the server's time zone)."""

    at = forms.DateTimeField(label=gettext_lazy("As it stood at"), required=False,
                             input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"],
                             widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}),
                             error_messages={"invalid": gettext_lazy("at: a date and time, like 2026-01-31T14:00")})
