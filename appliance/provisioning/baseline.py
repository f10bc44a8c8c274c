"""The BIOS baseline of a platform, checked against the platform's attribute registry before anything
is sent to a BMC: an unknown attribute or a value the registry does not allow is an error naming the
platform file and line (firmware/platforms/<file>:<line>).
"""

from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError


@dataclass(frozen=True)
class BaselineError:
    file: str
    line: int
    message: str

    def __str__(self):
        return f"{self.file}:{self.line}: {self.message}"


class BaselineInvalid(ValueError):
    def __init__(self, errors: list[BaselineError]):
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


def _display(path: Path) -> str:
    base = Path(settings.BASE_DIR)
    return str(path.relative_to(base)) if path.is_relative_to(base) else str(path)


def _load(path: Path):
    try:
        return YAML(typ="rt").load(path.read_text())
    except OSError as exc:
        raise BaselineInvalid([BaselineError(_display(path), 0, f"cannot read: {exc.strerror}")]) from exc
    except YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", -1) + 1
        raise BaselineInvalid([BaselineError(_display(path), line, f"not valid YAML: {exc}")]) from exc


def _line_of(mapping, key) -> int:
    try:
        return mapping.lc.key(key)[0] + 1
    except (AttributeError, KeyError, TypeError):
        return getattr(getattr(mapping, "lc", None), "line", -1) + 1


def _value_error(attribute: str, value, spec: dict, registry: str) -> str | None:
    kind = spec.get("type", "Enumeration")
    if kind == "Enumeration":
        allowed = [str(v) for v in spec.get("values", [])]
        if str(value) not in allowed:
            return (f"BIOS attribute {attribute}: {value!r} is not allowed by {registry} "
                    f"(allowed: {', '.join(allowed)})")
    elif kind == "Integer":
        if isinstance(value, bool) or not isinstance(value, int):
            return f"BIOS attribute {attribute}: {value!r} is not an integer ({registry})"
        low, high = spec.get("min"), spec.get("max")
        if (low is not None and value < low) or (high is not None and value > high):
            return f"BIOS attribute {attribute}: {value} is outside {low}..{high} ({registry})"
    elif kind == "String":
        if not isinstance(value, str):
            return f"BIOS attribute {attribute}: {value!r} is not text ({registry})"
        if spec.get("max_length") is not None and len(value) > spec["max_length"]:
            return f"BIOS attribute {attribute}: longer than {spec['max_length']} characters ({registry})"
    elif kind == "Boolean":
        if not isinstance(value, bool):
            return f"BIOS attribute {attribute}: {value!r} is not true/false ({registry})"
    else:
        return f"BIOS attribute {attribute}: type {kind!r} in {registry} is not one this suite knows"
    return None


def validate_platform_file(path: Path) -> list[BaselineError]:
    """Every error of one platform file's BIOS baseline (empty when it is valid or has no baseline)."""
    display = _display(path)
    root = _load(path)
    bios = (root or {}).get("bios") if hasattr(root, "get") else None
    if not bios:
        return []
    registry_name = bios.get("registry")
    if not registry_name:
        return [BaselineError(display, _line_of(root, "bios"), "bios: names no registry (bios.registry)")]
    registry_path = Path(settings.FIRMWARE_DIR) / "registries" / str(registry_name)
    if not registry_path.is_file():
        return [BaselineError(display, _line_of(bios, "registry"),
                              f"bios.registry: {_display(registry_path)} does not exist")]
    registry = _load(registry_path) or {}
    attributes = registry.get("attributes") or {}
    registry_display = _display(registry_path)
    errors = []
    baseline = bios.get("baseline") or {}
    if not hasattr(baseline, "items"):
        return [BaselineError(display, _line_of(bios, "baseline"), "bios.baseline: must be a mapping")]
    for attribute, value in baseline.items():
        line = _line_of(baseline, attribute)
        spec = attributes.get(attribute)
        if spec is None:
            errors.append(BaselineError(display, line,
                                        f"BIOS attribute {attribute} is not in the registry {registry_display}"))
            continue
        problem = _value_error(str(attribute), value, dict(spec), registry_display)
        if problem:
            errors.append(BaselineError(display, line, problem))
    return errors


def platform_file(platform) -> Path:
    """The file of an inventory Platform row (firmware/platforms/<file>)."""
    name = platform.file or f"{platform.slug}.yaml"
    return Path(settings.FIRMWARE_DIR) / "platforms" / Path(name).name


def validate_nodes(nodes) -> list[str]:
    """Errors of the BIOS baselines of the platforms these nodes use, one line each."""
    seen, errors = set(), []
    for node in nodes:
        platform = node.platform
        if platform is None or platform.pk in seen:
            continue
        seen.add(platform.pk)
        path = platform_file(platform)
        if not path.is_file():
            errors.append(f"{_display(path)}:0: platform file of {platform.slug} is missing")
            continue
        try:
            errors.extend(str(e) for e in validate_platform_file(path))
        except BaselineInvalid as exc:
            errors.extend(str(e) for e in exc.errors)
    return errors


def load_registry(platform_spec: dict) -> dict:
    """The attribute registry a platform's BIOS section names, as plain data ({} when none)."""
    name = ((platform_spec or {}).get("bios") or {}).get("registry")
    if not name:
        return {}
    path = Path(settings.FIRMWARE_DIR) / "registries" / Path(str(name)).name
    if not path.is_file():
        return {}
    return YAML(typ="safe").load(path.read_text()) or {}
