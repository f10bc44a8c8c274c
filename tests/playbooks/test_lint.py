"""The Ansible content passes ansible-lint's production profile, run from the repository root as README says.

The root's .ansible-lint holds the settings (production profile, offline: no Galaxy access); Ansible's
settings come from the root's ansible.cfg (no ANSIBLE_CONFIG: run as a user runs it), which names the roles
and the collection appliance.hgx under playbooks/, so every FQCN resolves and the syntax check of each stage
finds its roles. One run of ansible-lint (about 50 s here), every check below reads its output.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_the_ansible_content_passes_the_production_profile_from_the_root():
    venv_bin = Path(sys.executable).parent
    lint = shutil.which("ansible-lint", path=str(venv_bin)) or shutil.which("ansible-lint")
    assert lint, "ansible-lint is not installed (pip install -e '.[test]')"
    completed = subprocess.run(
        [lint, "--nocolor", "-v"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={"PATH": f"{venv_bin}:/usr/bin:/bin", "HOME": str(Path.home()), "ANSIBLE_LOCAL_TEMP": "/tmp"},
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    assert "Profile 'production' was required, and it passed" in output
    # Nothing unresolved: a role or a module of appliance.hgx not found would be a syntax-check failure.
    assert "syntax-check" not in output.replace("Executing syntax check", ""), output
    # The playbooks and the roles were found and checked from the root, not a subset of them.
    for checked in ("playbook playbooks/site.yml", "playbook playbooks/stages/acceptance.yml",
                    "role playbooks/roles/fabric", "role playbooks/roles/gpu_verify"):
        assert f"Executing syntax check on {checked}" in output, f"{checked} was not linted:\n{output}"
