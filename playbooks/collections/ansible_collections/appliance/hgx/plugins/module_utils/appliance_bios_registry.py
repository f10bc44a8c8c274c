# The one BIOS validator: whether a baseline value is one the platform's attribute registry allows,
# and the value to send for it. The redfish_bios module runs it (through appliance_bios) before
# anything goes to a BMC; the controller's pre-flight check (appliance/provisioning/baseline.py)
# loads this same file, so the two cannot disagree. Plain Python: no Ansible, no Django.
#
# A registry attribute (firmware/registries/*.yaml) is {type, values, min, max, max_length}:
# - Enumeration: `values` lists what the BMC accepts. Redfish names each by its ValueName, a string;
#   YAML reads `1` as a number, so a number in `values` or in a baseline stands for its decimal text,
#   and the text is what is sent. A boolean is never an enumeration value: YAML 1.1 reads `Off` as
#   false, and true/false are not what any BIOS enumeration names.
# - Integer: `min`/`max` bound it; a bound that is absent or null is no bound.
# - String: `max_length`, when present and not null, bounds its length.
# - Boolean: true or false.

from __future__ import annotations

KNOWN_TYPES = ("Enumeration", "Integer", "String", "Boolean")


def is_integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


def enumeration_text(value):
    """The ValueName a baseline or registry value stands for, or None when it can stand for none."""
    if isinstance(value, str):
        return value
    if is_integer(value):
        return str(value)
    return None


def definition_problem(definition):
    """What makes a registry attribute's definition unusable, or None."""
    if not isinstance(definition, dict):
        return "its definition is not a mapping"
    kind = definition.get("type", "Enumeration")
    if kind not in KNOWN_TYPES:
        return f"the registry gives the unknown type {kind!r} (known: {', '.join(KNOWN_TYPES)})"
    if kind == "Enumeration":
        values = definition.get("values")
        if not isinstance(values, list) or not values:
            return "the registry lists no values for this enumeration"
        odd = [value for value in values if enumeration_text(value) is None]
        if odd:
            return f"the registry's values {odd!r} are not names (text or whole numbers)"
    elif kind == "Integer":
        for bound in ("min", "max"):
            if definition.get(bound) is not None and not is_integer(definition[bound]):
                return f"the registry's {bound} {definition[bound]!r} is not a whole number or null"
        low, high = definition.get("min"), definition.get("max")
        if low is not None and high is not None and low > high:
            return f"the registry's min {low} is above its max {high}"
    elif kind == "String":
        limit = definition.get("max_length")
        if limit is not None and (not is_integer(limit) or limit < 0):
            return f"the registry's max_length {limit!r} is not a whole number of at least 0 or null"
    return None


def validate_value(name, value, definition):
    """An error text (starting with the attribute's name) when `value` is not allowed for attribute
    `name`, else None."""
    problem = definition_problem(definition)
    if problem:
        return f"{name}: {problem}"
    kind = definition.get("type", "Enumeration")
    if kind == "Enumeration":
        allowed = [enumeration_text(v) for v in definition["values"]]
        if enumeration_text(value) not in allowed:
            return f"{name}: {value!r} is not one of {', '.join(allowed)}"
    elif kind == "Integer":
        if not is_integer(value):
            return f"{name}: {value!r} is not an integer"
        low, high = definition.get("min"), definition.get("max")
        if low is not None and value < low:
            return f"{name}: {value} is below the minimum {low}"
        if high is not None and value > high:
            return f"{name}: {value} is above the maximum {high}"
    elif kind == "Boolean":
        if not isinstance(value, bool):
            return f"{name}: {value!r} is not a boolean"
    elif kind == "String":
        if not isinstance(value, str):
            return f"{name}: {value!r} is not a string"
        limit = definition.get("max_length")
        if limit is not None and len(value) > limit:
            return f"{name}: {value!r} is longer than {limit} characters"
    return None


def attribute_problem(name, value, registry):
    """validate_value, with an attribute the registry does not list as an error too."""
    definition = registry.get(name)
    if definition is None:
        return f"{name}: unknown attribute (not in the BIOS attribute registry)"
    return validate_value(name, value, definition)


def validate_baseline(baseline, registry):
    """All errors of `baseline` ({attribute: value}) against `registry` ({attribute: definition})."""
    return [error for error in (attribute_problem(name, baseline[name], registry) for name in sorted(baseline))
            if error]


def wire_value(value, definition):
    """What is sent to the BMC for a valid value: an enumeration's ValueName, anything else as is."""
    if isinstance(definition, dict) and definition.get("type", "Enumeration") == "Enumeration":
        return enumeration_text(value)
    return value


def wire_baseline(baseline, registry):
    """The baseline as sent to the BMC (validate it first)."""
    return {name: wire_value(value, registry.get(name)) for name, value in baseline.items()}
