"""The collection appliance.hgx: every module documented to ansible-doc's and ansible-test's standard
(its DOCUMENTATION options are its argument_spec), every role's variables declared in
meta/argument_specs.yml, and the collection builds with ansible-galaxy.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from django.conf import settings

COLLECTION_DIR = Path(settings.COLLECTION_DIR)
COLLECTIONS_PATH = COLLECTION_DIR.parents[2]  # the folder holding ansible_collections/
ROLES_DIR = Path(settings.PLAYBOOKS_DIR) / "roles"

MODULES = [
    "acceptance_fabric", "appliance_acceptance", "appliance_apply_config", "appliance_kernel_module",
    "appliance_package", "appliance_service", "gds_check", "ib_ports", "mig_layout", "mount_verify", "nvml_facts",
    "redfish_bios", "redfish_reset", "storage_bench", "topo_affinity",
]


def ansible_environment() -> dict:
    venv_bin = Path(sys.executable).parent
    return {"PATH": f"{venv_bin}:/usr/bin:/bin", "HOME": str(Path.home()), "ANSIBLE_LOCAL_TEMP": "/tmp",
            "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS_PATH), "ANSIBLE_NOCOLOR": "1", "LANG": "C.UTF-8"}


def test_the_collection_holds_exactly_the_documented_modules():
    found = sorted(p.stem for p in (COLLECTION_DIR / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
    assert found == MODULES


class _ArgumentSpec(Exception):
    def __init__(self, argument_spec, keywords):
        super().__init__("captured")
        self.argument_spec, self.keywords = argument_spec, keywords


def argument_spec(name: str) -> tuple[dict, dict]:
    """The argument_spec (and other AnsibleModule keywords) a module's main() builds, without running it."""
    sys.path.insert(0, str(COLLECTIONS_PATH))
    try:
        module = importlib.import_module(f"ansible_collections.appliance.hgx.plugins.modules.{name}")
    finally:
        sys.path.remove(str(COLLECTIONS_PATH))

    def capture(argument_spec=None, **keywords):
        raise _ArgumentSpec(argument_spec, keywords)

    original = module.AnsibleModule
    module.AnsibleModule = capture
    try:
        module.main()
    except _ArgumentSpec as captured:
        return captured.argument_spec, captured.keywords
    finally:
        module.AnsibleModule = original
    raise AssertionError(f"{name}: main() built no AnsibleModule")


def documentation(name: str) -> dict:
    from ansible.parsing.plugin_docs import read_docstring

    data = read_docstring(str(COLLECTION_DIR / "plugins" / "modules" / f"{name}.py"))
    return {key: data[key] for key in ("doc", "plainexamples", "returndocs")}


def is_text(value) -> bool:
    """A description: a string or a list of strings (a ': ' in plain YAML makes a mapping instead)."""
    return bool(value) and (isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value)))


def spec_mismatches(documented: dict, spec: dict) -> list[str]:
    """How a module's documented options differ from its argument_spec, in ansible-test's terms."""
    problems = []
    for option in sorted(set(documented) - set(spec)):
        problems.append(f"{option}: documented but not in the argument_spec")
    for option in sorted(set(spec) - set(documented)):
        problems.append(f"{option}: in the argument_spec but not documented")
    for option in sorted(set(documented) & set(spec)):
        doc, arg = documented[option], spec[option]
        for key, fallback in (("type", "str"), ("required", False), ("default", None), ("choices", None),
                              ("elements", None), ("aliases", None)):
            if doc.get(key, fallback) != arg.get(key, fallback):
                problems.append(f"{option}: {key} documented {doc.get(key, fallback)!r}, "
                                f"argument_spec {arg.get(key, fallback)!r}")
        if not is_text(doc.get("description")):
            problems.append(f"{option}: description is not text: {doc.get('description')!r}")
    return problems


@pytest.mark.parametrize("name", MODULES)
def test_the_documented_options_are_the_argument_spec(name):
    spec, _keywords = argument_spec(name)
    docs = documentation(name)
    doc = docs["doc"]
    assert doc["module"] == name
    for key in ("short_description", "description", "version_added", "author"):
        assert is_text(doc.get(key)), f"{name}: DOCUMENTATION's {key} is missing or not text: {doc.get(key)!r}"
    # ansible-test's form of an author: "Name (@github-handle)", or "Name (!UNKNOWN)" without one.
    authors = doc["author"] if isinstance(doc["author"], list) else [doc["author"]]
    assert all(re.match(r"^\w.*(\(@[\w-]+\)|\(!UNKNOWN\))$", author) for author in authors), doc["author"]
    assert spec_mismatches(doc.get("options") or {}, spec) == []
    # EXAMPLES are real tasks naming the module by its FQCN; RETURN documents what it returns.
    examples = yaml.safe_load(docs["plainexamples"])
    assert any(f"appliance.hgx.{name}" in task for task in examples), f"{name}: no example uses the FQCN"
    assert docs["returndocs"], f"{name}: no RETURN"


def test_a_mismatch_between_documentation_and_argument_spec_is_named():
    documented = {"node": {"description": "Name.", "type": "str", "required": True},
                  "size_mib": {"description": "Size.", "type": "int", "default": 512},
                  "extra": {"description": "Not in the spec.", "type": "bool"}}
    spec = {"node": {"type": "str", "required": True}, "size_mib": {"type": "int", "default": 1024},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"}}
    assert spec_mismatches(documented, spec) == [
        "extra: documented but not in the argument_spec",
        "state: in the argument_spec but not documented",
        "size_mib: default documented 512, argument_spec 1024",
    ]


@pytest.mark.slow
def test_ansible_doc_shows_every_module_and_the_filter():
    completed = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-doc"), "--json", *[f"appliance.hgx.{m}" for m in MODULES]],
        capture_output=True, text=True, timeout=300, env=ansible_environment())
    assert completed.returncode == 0, completed.stderr
    assert "[ERROR]" not in completed.stderr and "[WARNING]" not in completed.stderr, completed.stderr
    shown = json.loads(completed.stdout)
    assert sorted(shown) == sorted(f"appliance.hgx.{m}" for m in MODULES)
    for name, entry in shown.items():
        assert entry["doc"]["description"] and entry["examples"] and entry["return"], name
        # An options block that is not a mapping of documented options is what broke redfish_bios before.
        assert all(option.get("description") for option in entry["doc"].get("options", {}).values()), name

    completed = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-doc"), "--json", "-t", "filter", "appliance.hgx.node_path"],
        capture_output=True, text=True, timeout=300, env=ansible_environment())
    assert completed.returncode == 0, completed.stderr
    node_path = json.loads(completed.stdout)["appliance.hgx.node_path"]
    assert set(node_path["doc"]["options"]) == {"_input", "sysroot"}
    assert node_path["examples"] and node_path["return"]["_value"]["type"] == "path"


def role_variables(role: Path) -> set[str]:
    """The variables a role defines in defaults/main.yml."""
    defaults = role / "defaults" / "main.yml"
    return set(yaml.safe_load(defaults.read_text()) or {}) if defaults.is_file() else set()


@pytest.mark.parametrize("role", sorted(p.name for p in ROLES_DIR.iterdir() if (p / "tasks").is_dir()))
def test_every_role_declares_its_variables(role):
    spec_file = ROLES_DIR / role / "meta" / "argument_specs.yml"
    assert spec_file.is_file(), f"roles/{role} has no meta/argument_specs.yml"
    main = yaml.safe_load(spec_file.read_text())["argument_specs"]["main"]
    assert main.get("short_description"), f"roles/{role}: no short_description"
    options = main.get("options") or {}
    undeclared = sorted(role_variables(ROLES_DIR / role) - set(options))
    assert undeclared == [], f"roles/{role}: defaults not declared in meta/argument_specs.yml: {undeclared}"
    for name, option in options.items():
        assert option.get("description"), f"roles/{role}: option {name} has no description"
        assert option.get("type"), f"roles/{role}: option {name} has no type"


@pytest.mark.slow
def test_ansible_galaxy_builds_the_collection(tmp_path):
    completed = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-galaxy"), "collection", "build", str(COLLECTION_DIR),
         "--output-path", str(tmp_path)],
        capture_output=True, text=True, timeout=300, env=ansible_environment())
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["appliance-hgx-0.1.0.tar.gz"]
    with tarfile.open(tmp_path / "appliance-hgx-0.1.0.tar.gz") as archive:
        names = set(archive.getnames())
        manifest = json.load(archive.extractfile("MANIFEST.json"))
    assert manifest["collection_info"]["namespace"] == "appliance"
    assert manifest["collection_info"]["name"] == "hgx"
    assert {f"plugins/modules/{m}.py" for m in MODULES} <= names
    assert {"meta/runtime.yml", "plugins/filter/node_path.py", "plugins/filter/node_path.yml",
            "plugins/module_utils/appliance_redfish.py", "README.md"} <= names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc") or n.startswith("tests/output")]
