"""Where the appliance's own files lie: in a checkout, or in an installed wheel.

The repository keeps templates/, playbooks/ (the collection appliance.hgx included) and firmware/ at its
top level, beside the package. A wheel installs packages, not folders beside them, so the build
(appliance/core/packaging.py, named in pyproject.toml) copies these folders into the package, as
appliance/_data/<folder>. Installed, they lie next to the code that reads them whatever the
installation's prefix (a venv, `pip install --user`, `--target`, a system image): no lookup through
sys.prefix or a share/ folder that other installers place elsewhere. A checkout (an editable install
included) has no appliance/_data: the folders are read where they are. The package's own files
(static files, locale, the demo site, simnvml.c) are package data and lie in the package either way.

This module uses the standard library only: settings imports it first.
"""

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent
# The repository's top-level folders that a wheel carries under appliance/_data (packaging.FOLDERS).
DATA_FOLDERS = ("templates", "playbooks", "firmware", "docs")
WHEEL_DATA_DIR = PACKAGE_DIR / "_data"
# True in an installed wheel, False in a checkout.
INSTALLED = WHEEL_DATA_DIR.is_dir()
# The folder holding templates/, playbooks/ and firmware/: the checkout's root, or the wheel's data.
DATA_ROOT = WHEEL_DATA_DIR if INSTALLED else PACKAGE_DIR.parent


def default_state_dir() -> Path:
    """The state directory when APPLIANCE_STATE_DIR is not set. A checkout keeps its own var/; an
    installed wheel never writes into site-packages: /var/lib/appliance for root (a production
    controller), else $XDG_STATE_HOME/appliance (~/.local/state/appliance)."""
    if not INSTALLED:
        return DATA_ROOT / "var"
    if os.geteuid() == 0:
        return Path("/var/lib/appliance")
    xdg_state = os.environ.get("XDG_STATE_HOME", "")
    # The XDG specification: a relative path in the variable is invalid and is ignored.
    base = Path(xdg_state) if os.path.isabs(xdg_state) else Path.home() / ".local" / "state"
    return base / "appliance"


def program() -> str:
    """How a message names the appliance's command line: an installed wheel's `appliance`, a checkout's
    `manage.py` (messages that tell the operator what to run next)."""
    return "appliance" if INSTALLED else "manage.py"
