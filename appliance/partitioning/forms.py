"""Forms of the partitioning pages: the plan editor (requests as rows of a form set, or as YAML) and the
sizing advisor (typed values). Each field has a type and a range; names have the planner's pattern. What the
planner itself checks (a profile that exists, a pool that exists) it reports by the request's index."""

import re

from django import forms
from django.core.validators import RegexValidator
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from . import profiles

REQUEST_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}\Z")
POOL_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}\Z")
ISOLATIONS = [("soft", gettext_lazy("soft: MIG or time-slicing")), ("hard", gettext_lazy("hard: MIG only")),
              ("exclusive", gettext_lazy("exclusive: whole GPUs (training)"))]
MAX_REQUESTS = 500
MAX_YAML_BYTES = 256 * 1024
DTYPES = [("bf16", "bf16"), ("fp16", "fp16"), ("fp8", "fp8"), ("int8", "int8"), ("int4", "int4"), ("fp32", "fp32")]


class YamlRequestsError(ValueError):
    """The YAML text is not a list of requests; the message names the line or the key."""


def requests_from_yaml(text: str) -> list[dict]:
    """The requests of a YAML (or JSON) text: a list of requests, or a mapping with `requests`. Limits
    (size, depth, aliases) as for site files; errors name the line."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    from appliance.inventory import yamllimits

    if len(text.encode("utf-8", "replace")) > MAX_YAML_BYTES:
        raise YamlRequestsError(_("yaml: the text is over %(limit)s bytes") % {"limit": MAX_YAML_BYTES})
    problems: list[str] = []
    if not yamllimits.check_limits(text, lambda line, message: problems.append(f"yaml:{line}: {message}")):
        raise YamlRequestsError(problems[0] if problems else "yaml: over the limits")
    try:
        data = YAML(typ="safe", pure=True).load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise YamlRequestsError(f"yaml:{mark.line + 1 if mark else 1}: {exc.problem or exc}") from None
    except YAMLError as exc:
        raise YamlRequestsError(f"yaml: {exc}") from None
    if isinstance(data, dict):
        unknown = sorted(str(key) for key in data if key != "requests")
        if unknown:
            raise YamlRequestsError(_("yaml: unknown key %(key)s (the portal plans this appliance's own GPUs; "
                                      "give only requests)") % {"key": unknown[0][:40]})
        data = data.get("requests")
    if not isinstance(data, list) or not data:
        raise YamlRequestsError(_("yaml: expected a list of requests (or a mapping with requests:)"))
    if len(data) > MAX_REQUESTS:
        raise YamlRequestsError(_("yaml: %(count)s requests, at most %(limit)s") % {"count": len(data),
                                                                                     "limit": MAX_REQUESTS})
    for index, item in enumerate(data):
        if not isinstance(item, dict):
            raise YamlRequestsError(_("requests[%(index)s]: expected a mapping (name, memory_gb, ...)")
                                    % {"index": index})
    return data


class RequestForm(forms.Form):
    name = forms.CharField(label=gettext_lazy("Name"), max_length=63, validators=[RegexValidator(
        REQUEST_NAME, gettext_lazy("lower-case letters, digits, '.', '_' and '-', starting with a letter or digit"))])
    memory_gb = forms.DecimalField(label=gettext_lazy("Memory (GB)"), min_value=0.1, max_value=100000,
                                   decimal_places=2)
    compute_slices = forms.IntegerField(label=gettext_lazy("Compute slices"), min_value=1, max_value=7,
                                        required=False, help_text=gettext_lazy("of 7; empty: any"))
    replicas = forms.IntegerField(label=gettext_lazy("Replicas"), min_value=1, max_value=10000, initial=1)
    isolation = forms.ChoiceField(label=gettext_lazy("Isolation"), choices=ISOLATIONS, initial="soft")
    weight = forms.DecimalField(label=gettext_lazy("Weight"), min_value=0.01, max_value=1000000,
                                decimal_places=2, initial=1)
    pool = forms.CharField(label=gettext_lazy("Pool"), max_length=64, required=False, validators=[RegexValidator(
        POOL_NAME, gettext_lazy("a pool's name"))])

    def request(self) -> dict:
        data = self.cleaned_data
        request = {"name": data["name"], "memory_gb": float(data["memory_gb"]), "replicas": data["replicas"],
                   "isolation": data["isolation"], "weight": float(data["weight"])}
        if data.get("compute_slices"):
            request["compute_slices"] = data["compute_slices"]
        if data.get("pool"):
            request["pool"] = data["pool"]
        return request


RequestFormSet = forms.formset_factory(RequestForm, extra=3, max_num=MAX_REQUESTS, absolute_max=MAX_REQUESTS,
                                       validate_max=True)


class PlanTextForm(forms.Form):
    description = forms.CharField(label=gettext_lazy("Description"), max_length=200, required=False)
    requests_yaml = forms.CharField(
        label=gettext_lazy("Requests as YAML"), required=False, max_length=MAX_YAML_BYTES,
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false", "autocapitalize": "off"}),
        help_text=gettext_lazy("When filled in, these requests are used and the rows above are ignored: "
                               "a list of {name, memory_gb, compute_slices, replicas, isolation, weight, pool}."))


def gpu_model_choices() -> list[tuple[str, str]]:
    return [(model_id, model_id) for model_id in profiles.MODELS]


class AdvisorForm(forms.Form):
    """The model's shape as typed values (a model directory is read by `manage.py partition size
    --model-dir` on the appliance, not from a path typed into a web page)."""

    params_billion = forms.DecimalField(label=gettext_lazy("Parameters (billions)"), min_value=0.001,
                                        max_value=100000, decimal_places=3)
    layers = forms.IntegerField(label=gettext_lazy("Layers"), min_value=1, max_value=1000)
    kv_heads = forms.IntegerField(label=gettext_lazy("Key/value heads"), min_value=1, max_value=1024)
    head_dim = forms.IntegerField(label=gettext_lazy("Head dimension"), min_value=1, max_value=4096)
    hidden_size = forms.IntegerField(label=gettext_lazy("Hidden size"), min_value=1, max_value=1 << 24,
                                     required=False, help_text=gettext_lazy("empty: estimated"))
    attention_heads = forms.IntegerField(label=gettext_lazy("Attention heads"), min_value=1, max_value=1 << 16,
                                         required=False)
    dtype = forms.ChoiceField(label=gettext_lazy("Weights type"), choices=DTYPES, initial="bf16")
    context = forms.IntegerField(label=gettext_lazy("Context (tokens)"), min_value=1, max_value=10_000_000,
                                 initial=8192)
    concurrency = forms.IntegerField(label=gettext_lazy("Concurrent sequences"), min_value=1, max_value=100_000,
                                     initial=1)
    gpu = forms.ChoiceField(label=gettext_lazy("GPU model"), initial="h100-80gb")
    gpus_per_node = forms.IntegerField(label=gettext_lazy("GPUs per node"), min_value=1, max_value=64, initial=8)
    nodes = forms.IntegerField(label=gettext_lazy("Nodes"), min_value=1, max_value=10000, initial=1)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["gpu"].choices = gpu_model_choices()
