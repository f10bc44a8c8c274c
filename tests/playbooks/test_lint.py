"""The playbooks pass ansible-lint's production profile (offline: no Galaxy access)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

pytestmark = pytest.mark.slow


def test_playbooks_pass_the_production_profile():
    venv_bin = Path(sys.executable).parent
    lint = shutil.which("ansible-lint", path=str(venv_bin)) or shutil.which("ansible-lint")
    assert lint, "ansible-lint is not installed (pip install -e '.[test]')"
    completed = subprocess.run(
        [lint, "--profile", "production", "--offline", "--nocolor"],
        cwd=settings.PLAYBOOKS_DIR, capture_output=True, text=True, timeout=300,
        env={"PATH": f"{venv_bin}:/usr/bin:/bin", "HOME": str(Path.home()), "ANSIBLE_LOCAL_TEMP": "/tmp"},
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "Profile 'production' was required, and it passed" in completed.stdout + completed.stderr
