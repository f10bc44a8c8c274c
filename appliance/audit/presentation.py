"""How records and verification results are shown: a diff as rows, the rest as indented JSON."""

import dataclasses
import json

from django.utils.translation import gettext_lazy as _

from . import catalogue


def pretty_json(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def present_details(details: dict) -> dict:
    """Splits a record's details into a change table, a state table and whatever else remains."""
    details = dict(details or {})
    changes = details.pop("changes", None)
    presented = {"changes": [], "state": [], "state_label": "", "other": ""}
    if isinstance(changes, dict):
        for field, pair in sorted(changes.items()):
            before, after = pair if isinstance(pair, list | tuple) and len(pair) == 2 else (None, pair)
            presented["changes"].append((field, pretty_value(before), pretty_value(after)))
    for key, label in (("after", _("State after")), ("before", _("State before"))):
        if isinstance(details.get(key), dict) and not presented["state"]:
            presented["state_label"] = label
            presented["state"] = [(field, pretty_value(value)) for field, value in sorted(details.pop(key).items())]
    if details:
        presented["other"] = pretty_json(details)
    return presented


def pretty_value(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def as_mapping(value):
    """A verification result's parts (dataclass, object or dict) as plain JSON-able data."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, bytes):
        return value.hex()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return as_mapping(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): as_mapping(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_mapping(v) for v in value]
    if hasattr(value, "_meta") and hasattr(value, "pk"):
        from django.forms.models import model_to_dict

        return as_mapping(model_to_dict(value))
    if hasattr(value, "__dict__"):
        return as_mapping({k: v for k, v in vars(value).items() if not k.startswith("_")})
    return str(value)


def coverage_matrix() -> dict:
    """The catalogue as auditors read it: one row per event type, one column per standard, and per
    standard every control with the events that serve as its evidence."""
    events = sorted(catalogue.CATALOGUE.values(), key=lambda e: (e.category, e.name))
    rows = [{
        "name": e.name, "category": e.category, "severity": e.severity, "description": e.description,
        "ocsf_class": e.ocsf_class, "ocsf_class_name": e.ocsf_class_name, "ocsf_activity": e.ocsf_activity,
        "controls": [list(e.controls.get(standard, ())) for standard in catalogue.STANDARDS],
        "controls_by_standard": {standard: list(e.controls.get(standard, ())) for standard in catalogue.STANDARDS},
    } for e in events]
    standards = []
    for index, standard in enumerate(catalogue.STANDARDS):
        controls: dict[str, list[str]] = {}
        for row in rows:
            for control in row["controls"][index]:
                controls.setdefault(control, []).append(row["name"])
        standards.append({"name": standard, "slug": f"std-{index}",
                          "controls": [(c, controls[c]) for c in sorted(controls, key=_control_sort_key)]})
    return {"standards": list(catalogue.STANDARDS), "rows": rows, "coverage": standards}


def _control_sort_key(control: str):
    parts = []
    for chunk in control.replace("(", ".").replace(")", "").replace("-", ".").split("."):
        parts.append((0, int(chunk), "") if chunk.isdigit() else (1, 0, chunk))
    return parts
