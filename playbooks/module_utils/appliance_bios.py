# BIOS baseline logic shared by the redfish_bios module and its tests: checking a baseline against
# the platform's attribute registry, comparing it with what a BMC reports, and converging a BMC to it.
#
# Emulated and many real BMCs publish no attribute registry (or accept any value and fail later), so
# every value is checked against firmware/registries/ BEFORE anything is sent.

from __future__ import annotations

try:
    from ansible.module_utils.appliance_redfish import RedfishError
except ImportError:  # imported outside Ansible (unit tests put module_utils on sys.path)
    from appliance_redfish import RedfishError

SETTINGS_ANNOTATION = "@Redfish.Settings"


class BaselineError(Exception):
    """The baseline asks for something the registry or the BMC does not allow; nothing was sent."""


def _is_integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


def validate_value(name, value, definition):
    """An error text when `value` is not allowed for attribute `name`, else None."""
    kind = definition.get("type", "Enumeration")
    if kind == "Enumeration":
        allowed = [str(v) for v in definition.get("values", [])]
        if not isinstance(value, str) or value not in allowed:
            return f"{name}: {value!r} is not one of {', '.join(allowed)}"
    elif kind == "Integer":
        if not _is_integer(value):
            return f"{name}: {value!r} is not an integer"
        if "min" in definition and value < definition["min"]:
            return f"{name}: {value} is below the minimum {definition['min']}"
        if "max" in definition and value > definition["max"]:
            return f"{name}: {value} is above the maximum {definition['max']}"
    elif kind == "Boolean":
        if not isinstance(value, bool):
            return f"{name}: {value!r} is not a boolean"
    elif kind == "String":
        if not isinstance(value, str):
            return f"{name}: {value!r} is not a string"
        if "max_length" in definition and len(value) > definition["max_length"]:
            return f"{name}: {value!r} is longer than {definition['max_length']} characters"
    else:
        return f"{name}: the registry gives the unknown type {kind!r}"
    return None


def validate_baseline(baseline, registry):
    """All errors of `baseline` ({attribute: value}) against `registry` ({attribute: definition})."""
    errors = []
    for name in sorted(baseline):
        definition = registry.get(name)
        if definition is None:
            errors.append(f"{name}: unknown attribute (not in the BIOS attribute registry)")
            continue
        error = validate_value(name, baseline[name], definition)
        if error:
            errors.append(error)
    return errors


def same_value(wanted, reported):
    # BMCs report enumerations as strings and integers as numbers, but some send numbers as strings.
    if _is_integer(wanted) and isinstance(reported, str) and reported.strip().lstrip("-").isdigit():
        return wanted == int(reported)
    return wanted == reported


def differences(baseline, current):
    """[{attribute, old, new}] for every baseline attribute whose value differs from `current`."""
    return [
        {"attribute": name, "old": current.get(name), "new": baseline[name]}
        for name in sorted(baseline)
        if not same_value(baseline[name], current.get(name))
    ]


def settings_target(bios):
    """The resource to PATCH: the Settings object the BMC names (applied at once or at next boot), or the
    Bios resource itself when the BMC publishes none (Redfish: such a resource is written directly)."""
    settings = bios.get(SETTINGS_ANNOTATION)
    if isinstance(settings, dict):
        target = (settings.get("SettingsObject") or {}).get("@odata.id")
        if target:
            return target
    return bios.get("@odata.id")


def read_bios(client, system_id=None):
    """(system, bios resource, attributes in effect, attributes pending at next boot)."""
    system = client.system(system_id)
    bios_path = client.link(system, "Bios", system.get("@odata.id", "the system"))
    bios = client.get(bios_path)
    current = bios.get("Attributes")
    if not isinstance(current, dict):
        raise RedfishError(f"{client.node}: BMC {client.display_url}: {bios_path} has no Attributes")
    pending = {}
    target = settings_target(bios)
    if target and target.rstrip("/") != bios_path.rstrip("/"):
        settings = client.get(target)
        pending_values = settings.get("Attributes")
        if isinstance(pending_values, dict):
            pending = {k: v for k, v in pending_values.items() if k in current and not same_value(v, current[k])}
    return system, bios, current, pending


def converge(client, baseline, registry, check_mode=False, system_id=None):
    """Bring the BIOS of `client`'s system to `baseline`. Returns a result dict:
    system_id, system_uri, bios_uri, attributes (read back), changes [{attribute, old, new}],
    pending {attribute: value} (accepted, applied at next boot), changed."""
    errors = validate_baseline(baseline, registry)
    if errors:
        raise BaselineError("the BIOS baseline does not match the attribute registry: " + "; ".join(errors))

    system, bios, current, pending = read_bios(client, system_id)
    missing = sorted(name for name in baseline if name not in current)
    if missing:
        raise BaselineError(f"{client.node}: BMC {client.display_url} does not expose the BIOS attribute(s) "
                            f"{', '.join(missing)} named by the baseline")
    effective = {**current, **pending}
    changes = differences(baseline, effective)
    result = {
        "system_id": system.get("Id", ""),
        "system_uri": system.get("@odata.id", ""),
        "bios_uri": bios.get("@odata.id", ""),
        "changes": changes,
        "changed": bool(changes),
        "before": dict(effective),
    }
    if not changes or check_mode:
        result["attributes"] = current
        result["pending"] = pending
        return result

    target = settings_target(bios)
    client.patch(target, {"Attributes": {c["attribute"]: c["new"] for c in changes}})

    _, _, current_after, pending_after = read_bios(client, system_id)
    not_applied = []
    for change in changes:
        name = change["attribute"]
        if same_value(change["new"], current_after.get(name)):
            continue
        if name in pending_after and same_value(change["new"], pending_after[name]):
            continue
        not_applied.append(f"{name} (sent {change['new']!r}, BMC reports {current_after.get(name)!r})")
    if not_applied:
        raise RedfishError(f"{client.node}: BMC {client.display_url} accepted the BIOS change but reading back "
                           f"shows it was not applied: {', '.join(not_applied)}")
    result["attributes"] = current_after
    result["pending"] = pending_after
    return result
