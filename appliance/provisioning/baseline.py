"""The BIOS baseline of a platform, checked against the platform's attribute registry before anything
is sent to a BMC: an unknown attribute or a value the registry does not allow is an error naming the
platform file and line (firmware/platforms/<file>:<line>).

The rules are the playbook module's own (playbooks/collections/ansible_collections/appliance/hgx/plugins/module_utils/appliance_bios_registry.py, plain
Python that runs on the node side too): what passes here is what the redfish_bios module accepts.
"""

import functools
import importlib.util
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


@functools.cache
def bios_rules():
    """The BIOS validator of the playbooks (module_utils/appliance_bios_registry.py), loaded from its file."""
    path = Path(settings.COLLECTION_DIR) / "plugins" / "module_utils" / "appliance_bios_registry.py"
    spec = importlib.util.spec_from_file_location("appliance_bios_registry", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    if not hasattr(attributes, "items"):
        return [BaselineError(registry_display, _line_of(registry, "attributes"), "attributes: must be a mapping")]
    rules = bios_rules()
    for attribute, value in baseline.items():
        problem = rules.attribute_problem(str(attribute), value, attributes)
        if problem:
            errors.append(BaselineError(display, _line_of(baseline, attribute),
                                        f"BIOS attribute {problem} ({registry_display})"))
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
