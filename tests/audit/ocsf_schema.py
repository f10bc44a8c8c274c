"""A validator for OCSF 1.1.0 events, against the schema data extracted from the OCSF schema
repository (tests/audit/data/ocsf-1.1.0.json; its "source" says from where and how).

It walks an event the way the schema defines it: the class's attributes (a profile's attributes
only when the event names that profile in metadata.profiles), then every object attribute with
that object's own attributes, at every level. It reports, each with the attribute's path:
- a required attribute that is missing or null;
- an attribute the class or object does not define (inside `unmapped` and other free-form `object`
  or `json_t` attributes anything goes);
- a value of the wrong type (string, integer, long, float, boolean, object, array), a string longer
  than its type allows or not matching the type's pattern (ip_t, hostname_t, uuid_t, ...), a number
  outside the type's range;
- an enumerated attribute whose value is not in its enumeration; a sibling label (severity,
  status, activity_name, type, ...) that is not the caption of its id (unless the id is 99, Other);
- an object's constraints (at_least_one, just_one) not met;
- class_uid, category_uid and type_uid that do not agree with the class, a class or category
  name that is not the schema's caption, a profile the class does not offer.
"""

import json
import re
from functools import cache
from pathlib import Path

SCHEMA_FILE = Path(__file__).parent / "data" / "ocsf-1.1.0.json"
OTHER = "99"


@cache
def schema() -> dict:
    return json.loads(SCHEMA_FILE.read_text())


@cache
def _pattern(regex: str):
    return re.compile(regex)


def _base_type(type_name: str) -> tuple[str, list[dict]]:
    """The primitive a type reduces to (string_t, integer_t, long_t, float_t, boolean_t, json_t),
    with the definitions met on the way (each may add a regex, a maximum length, a range)."""
    types, chain = schema()["types"], []
    while type_name in types:
        chain.append(types[type_name])
        parent = types[type_name].get("type")
        if parent is None or parent == type_name:
            break
        type_name = parent
    return type_name, chain


def _check_primitive(value, type_name: str, path: str, problems: list[str]) -> None:
    base, definitions = _base_type(type_name)
    if base == "json_t":
        return
    if base == "string_t":
        if not isinstance(value, str):
            problems.append(f"{path}: {type_name} expects a string, got {type(value).__name__}")
            return
        for definition in definitions:
            if "max_len" in definition and len(value) > definition["max_len"]:
                problems.append(f"{path}: longer than {type_name}'s {definition['max_len']} characters")
            if "regex" in definition and not _pattern(definition["regex"]).search(value):
                problems.append(f"{path}: {value!r} is not a valid {type_name}")
        return
    if base in ("integer_t", "long_t"):
        if type(value) is not int:
            problems.append(f"{path}: {type_name} expects an integer, got {type(value).__name__}")
            return
        limit = 2**31 if base == "integer_t" else 2**63
        if not -limit <= value < limit:
            problems.append(f"{path}: {value} is out of {base}'s range")
    elif base == "float_t":
        if type(value) not in (int, float):
            problems.append(f"{path}: {type_name} expects a number, got {type(value).__name__}")
            return
    elif base == "boolean_t":
        if type(value) is not bool:
            problems.append(f"{path}: {type_name} expects a boolean, got {type(value).__name__}")
        return
    else:
        problems.append(f"{path}: unknown type {type_name}")
        return
    for definition in definitions:
        if "range" in definition and not definition["range"][0] <= value <= definition["range"][1]:
            problems.append(f"{path}: {value} is outside {type_name}'s range {definition['range']}")


def _check_value(value, attribute: dict, path: str, profiles: set, problems: list[str]) -> None:
    type_name = attribute["type"]
    if type_name == "object":
        if not isinstance(value, dict):
            problems.append(f"{path}: expects an object, got {type(value).__name__}")
        return
    if type_name in schema()["objects"]:
        if not isinstance(value, dict):
            problems.append(f"{path}: {type_name} expects an object, got {type(value).__name__}")
            return
        definition = schema()["objects"][type_name]
        _check_attributes(value, definition["attributes"], definition["constraints"], path, profiles, problems)
        return
    _check_primitive(value, type_name, path, problems)
    if "enum" in attribute and not isinstance(value, bool) and str(value) not in attribute["enum"]:
        problems.append(f"{path}: {value!r} is not one of {sorted(attribute['enum'], key=_enum_order)}")


def _enum_order(key: str):
    return (0, int(key), "") if key.lstrip("-").isdigit() else (1, 0, key)


def _check_attributes(data: dict, attributes: dict, constraints: dict, path: str, profiles: set,
                      problems: list[str]) -> None:
    def applies(attribute: dict) -> bool:
        return attribute.get("profile") is None or attribute["profile"] in profiles

    where = f"{path}." if path else ""
    for name, attribute in attributes.items():
        if attribute["requirement"] == "required" and applies(attribute) and data.get(name) is None:
            problems.append(f"{where}{name}: required attribute is missing")
    for name, value in data.items():
        attribute = attributes.get(name)
        if attribute is None or not applies(attribute):
            problems.append(f"{where}{name}: not an attribute of this {'object' if path else 'class'}"
                            + (f" without the {attribute['profile']!r} profile" if attribute else ""))
            continue
        if value is None:
            continue
        if attribute["is_array"]:
            if not isinstance(value, list):
                problems.append(f"{where}{name}: expects an array, got {type(value).__name__}")
                continue
            for index, item in enumerate(value):
                _check_value(item, attribute, f"{where}{name}[{index}]", profiles, problems)
        else:
            _check_value(value, attribute, f"{where}{name}", profiles, problems)
        sibling = attribute.get("sibling")
        if "enum" in attribute and sibling in data and str(value) != OTHER and str(value) in attribute["enum"]:
            caption = attribute["enum"][str(value)]
            if data[sibling] != caption:
                problems.append(f"{where}{sibling}: {data[sibling]!r} is not the caption of {name} {value} "
                                f"({caption!r})")
    present = {name for name, value in data.items() if value is not None}
    for name in constraints.get("at_least_one", []):
        if name in present:
            break
    else:
        if constraints.get("at_least_one"):
            problems.append(f"{path or 'event'}: needs at least one of {constraints['at_least_one']}")
    if constraints.get("just_one") and len(present.intersection(constraints["just_one"])) != 1:
        problems.append(f"{path or 'event'}: needs exactly one of {constraints['just_one']}")


# Attributes whose enumerations the schema server computes from the classes and categories.
_CLASSIFICATION = ("class_uid", "category_uid", "type_uid", "class_name", "category_name")


def problems_of(event) -> list[str]:
    """Every way `event` breaks OCSF 1.1.0 (empty when it is a valid event)."""
    if not isinstance(event, dict):
        return [f"an event is an object, got {type(event).__name__}"]
    class_uid = event.get("class_uid")
    definition = schema()["classes"].get(str(class_uid))
    if definition is None:
        return [f"class_uid: {class_uid!r} is not a class of the schema data ({', '.join(schema()['classes'])})"]
    problems = []
    metadata = event.get("metadata")
    profiles = metadata.get("profiles", []) if isinstance(metadata, dict) else []
    profiles = set(profiles) if isinstance(profiles, list) and all(isinstance(p, str) for p in profiles) else set()
    for profile in sorted(profiles - set(definition["profiles"])):
        problems.append(f"metadata.profiles: {definition['name']} does not offer the {profile!r} profile")
    attributes = {name: attribute for name, attribute in definition["attributes"].items()
                  if name not in _CLASSIFICATION}
    _check_attributes({k: v for k, v in event.items() if k not in _CLASSIFICATION}, attributes,
                      definition["constraints"], "", profiles, problems)
    if event.get("category_uid") != definition["category_uid"]:
        problems.append(f"category_uid: {event.get('category_uid')!r}, the class's category is "
                        f"{definition['category_uid']}")
    activity_id = event.get("activity_id")
    if type(activity_id) is int and event.get("type_uid") != int(class_uid) * 100 + activity_id:
        problems.append(f"type_uid: {event.get('type_uid')!r} is not class_uid * 100 + activity_id")
    for name, expected in (("class_name", definition["caption"]), ("category_name", definition["category_name"])):
        if name in event and event[name] != expected:
            problems.append(f"{name}: {event[name]!r} is not {expected!r}")
    return problems
