# BIOS baseline logic shared by the redfish_bios module and its tests: checking a baseline against
# the platform's attribute registry, comparing it with what a BMC reports, and converging a BMC to it.
#
# Emulated and many real BMCs publish no attribute registry (or accept any value and fail later), so
# every value is checked against firmware/registries/ BEFORE anything is sent, by the validator in
# appliance_bios_registry (the controller's pre-flight check runs the same one).

from __future__ import annotations

import time

try:
    from ansible_collections.appliance.hgx.plugins.module_utils.appliance_bios_registry import (
        is_integer,
        validate_baseline,
        wire_baseline,
    )
    from ansible_collections.appliance.hgx.plugins.module_utils.appliance_redfish import RedfishError
except ImportError:  # imported outside Ansible (unit tests put module_utils on sys.path)
    from appliance_bios_registry import is_integer, validate_baseline, wire_baseline
    from appliance_redfish import RedfishError

SETTINGS_ANNOTATION = "@Redfish.Settings"


class BaselineError(Exception):
    """The baseline asks for something the registry or the BMC does not allow; nothing was sent."""


def _as_number(value):
    if is_integer(value):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def same_value(wanted, reported):
    # BMCs report enumerations as strings and integers as numbers, but some send numbers as strings,
    # and an enumeration of numbers (NumaNodesPerSocket "1") may come back either way.
    if is_integer(wanted) != is_integer(reported) and not isinstance(wanted, bool) \
            and not isinstance(reported, bool):
        number = _as_number(wanted), _as_number(reported)
        if None not in number:
            return number[0] == number[1]
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


def supported_apply_times(bios):
    settings = bios.get(SETTINGS_ANNOTATION)
    values = settings.get("SupportedApplyTimes") if isinstance(settings, dict) else None
    return [v for v in values if isinstance(v, str)] if isinstance(values, list) else []


def read_settings(client, bios, current):
    """(pending {attribute: value} that differ from `current`, ETag of the Settings object or None)."""
    target = settings_target(bios)
    bios_path = bios.get("@odata.id", "")
    if not target or target.rstrip("/") == bios_path.rstrip("/"):
        return {}, None
    settings, etag = client.get_with_etag(target)
    pending_values = settings.get("Attributes")
    pending = {}
    if isinstance(pending_values, dict):
        pending = {k: v for k, v in pending_values.items() if k in current and not same_value(v, current[k])}
    return pending, etag


def read_bios(client, system_id=None):
    """(system, bios resource, attributes in effect, attributes pending at next boot)."""
    system, bios, current, pending, _etag = _read_all(client, system_id)
    return system, bios, current, pending


def _read_all(client, system_id=None):
    system = client.system(system_id)
    bios_path = client.link(system, "Bios", system.get("@odata.id", "the system"))
    bios = client.get(bios_path)
    current = bios.get("Attributes")
    if not isinstance(current, dict):
        raise RedfishError(f"{client.node}: BMC {client.display_url}: {bios_path} has no Attributes")
    pending, etag = read_settings(client, bios, current)
    return system, bios, current, pending, etag


def converge(client, baseline, registry, check_mode=False, system_id=None):
    """Bring the BIOS of `client`'s system to `baseline`. Returns a result dict:
    system_id, system_uri, bios_uri, attributes (in effect, read back), changes [{attribute, old, new}],
    pending {attribute: value} (accepted, applied by the next reset), changed.

    The PATCH goes to the Settings object the BMC names, with If-Match (its ETag) and, where the BMC
    lists OnReset among its SupportedApplyTimes, "@Redfish.SettingsApplyTime" OnReset: the firmware
    stage restarts the server itself, within the site's maintenance window, rather than let a BMC
    restart it at a moment of its choosing."""
    errors = validate_baseline(baseline, registry)
    if errors:
        raise BaselineError("the BIOS baseline does not match the attribute registry: " + "; ".join(errors))
    baseline = wire_baseline(baseline, registry)

    system, bios, current, pending, etag = _read_all(client, system_id)
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
        "auth": client.auth_mode,
    }
    if not changes or check_mode:
        result["attributes"] = current
        result["pending"] = pending
        return result

    body = {"Attributes": {c["attribute"]: c["new"] for c in changes}}
    if "OnReset" in supported_apply_times(bios):
        body["@Redfish.SettingsApplyTime"] = {"ApplyTime": "OnReset"}
    client.patch(settings_target(bios), body, etag=etag)

    current_after, pending_after = _read_all(client, system_id)[2:4]
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


def apply_staged(client, expected, timeout, system_id=None, interval=2.0):
    """Restart the system so that its BIOS applies the staged values, wait until it is powered on again
    with `expected` ({attribute: value}) in effect and nothing staged, and return
    {reset_type, seconds, attributes}."""
    system = client.system(system_id)
    started = time.monotonic()
    reset_type = client.reset(system)
    where = system.get("@odata.id", "the system")

    def back_with_values():
        now = client.get(where)
        if now.get("PowerState") != "On":
            return None
        current, pending = _read_all(client, system_id)[2:4]
        if pending or differences(expected, current):
            return None
        return current

    attributes = client.wait_for(
        f"did not come back after {reset_type} with the staged BIOS values in effect "
        f"({', '.join(f'{k}={v}' for k, v in sorted(expected.items()))})",
        back_with_values, timeout, interval=interval)
    return {"reset_type": reset_type, "seconds": round(time.monotonic() - started, 1), "attributes": attributes}
