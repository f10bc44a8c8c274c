"""Where model files may be registered from: the artifact roots, and the check that a source a user gave
(an absolute path or a file:// URI) names a file or directory inside one of them.

The roots are settings.LIFECYCLE_ARTIFACT_ROOTS when the site sets them (APPLIANCE_MODEL_ROOTS), otherwise
the appliances' shared filesystems: a real appliance's mount points, and on a simulated appliance the
directory that stands for each filesystem (SIMULATION_DIR/filesystems/<name>, made here on first use), which a
source names by the filesystem's mount point as on a real appliance (/mnt/scratch/...) or by that directory.
A source is resolved (symlinks followed) before it is compared with the roots, so a link inside a root that
points elsewhere is refused like the path it points to.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from django.conf import settings
from django.utils.translation import gettext as _

from .errors import LifecycleError

MAX_SOURCE_LENGTH = 1000
MLFLOW_URI = re.compile(r"^(models|runs):/", re.IGNORECASE)


def simulated_filesystem_dir(name: str) -> Path:
    """The directory that stands for shared filesystem `name` of a simulated appliance."""
    return Path(settings.SIMULATION_DIR) / "filesystems" / name


def simulated_mount(path: str) -> str:
    """On a simulated appliance, a path under a shared filesystem's mount point (what its site declares and
    what a user of a real appliance types: /mnt/scratch/models/llm) is the same path under the directory that
    stands for that filesystem; any other path is returned as it is."""
    if settings.LIFECYCLE_ARTIFACT_ROOTS:
        return path
    from appliance.inventory.models import Filesystem

    lexical = Path(os.path.normpath(path))
    for filesystem in Filesystem.objects.filter(appliance__simulated=True).order_by("appliance__name", "name"):
        mount = Path(os.path.normpath(filesystem.mount_point or "/"))
        if mount != Path("/") and lexical.is_relative_to(mount):
            return str(simulated_filesystem_dir(filesystem.name) / lexical.relative_to(mount))
    return path


def _configured_roots() -> list[Path]:
    """The roots as configured (absolute, not resolved: a root may itself be a link)."""
    if settings.LIFECYCLE_ARTIFACT_ROOTS:
        candidates = [Path(root) for root in settings.LIFECYCLE_ARTIFACT_ROOTS]
    else:
        from appliance.inventory.models import Filesystem

        candidates = []
        for filesystem in Filesystem.objects.select_related("appliance").order_by("appliance__name", "name"):
            if filesystem.appliance.simulated:
                directory = simulated_filesystem_dir(filesystem.name)
                directory.mkdir(parents=True, exist_ok=True)
                candidates.append(directory)
            elif filesystem.mount_point:
                candidates.append(Path(filesystem.mount_point))
    return [candidate for candidate in candidates if candidate.is_absolute()]


def artifact_roots() -> list[Path]:
    """The directories model files may come from, resolved, in a stable order, without duplicates."""
    roots: list[Path] = []
    for candidate in _configured_roots():
        resolved = Path(os.path.realpath(candidate))
        if resolved not in roots:
            roots.append(resolved)
    return roots


def _path_of(source: str) -> str:
    if not isinstance(source, str) or not source.strip():
        raise LifecycleError(_("source: a path or a file:// URI is needed"), "source")
    if len(source) > MAX_SOURCE_LENGTH:
        raise LifecycleError(_("source: at most %(n)d characters") % {"n": MAX_SOURCE_LENGTH}, "source")
    if any(ord(c) < 32 or ord(c) == 127 for c in source):
        raise LifecycleError(_("source: control characters are not allowed"), "source")
    mlflow_uri = MLFLOW_URI.match(source)
    if mlflow_uri:
        # What MLflow's client sends for a copy of a version (models:/NAME/VERSION) or a run's artifacts
        # (runs:/RUN_ID/PATH): MLflow names, not files. The appliance hashes and signs files it can read.
        what = (_("an MLflow model URI (a version of a registered model)") if mlflow_uri.group(1).lower() == "models"
                else _("an MLflow run URI (a tracking server's run artifacts)"))
        raise LifecycleError(_("source: %(source)r is %(what)s, not files on the appliance; give the directory of "
                               "the version's files under an artifact root (an absolute path or a file:// URI)")
                             % {"source": source, "what": what}, "source")
    if "://" in source or source.lower().startswith("file:"):
        parts = urlsplit(source)
        if parts.scheme.lower() != "file":
            raise LifecycleError(_("source: %(scheme)r URIs are not allowed; give a path on the appliance's "
                                   "filesystems or a file:// URI") % {"scheme": parts.scheme}, "source")
        if parts.netloc not in ("", "localhost"):
            raise LifecycleError(_("source: file:// URIs name no host (got %(host)r)") % {"host": parts.netloc},
                                 "source")
        if parts.query or parts.fragment:
            raise LifecycleError(_("source: a file:// URI has no query or fragment"), "source")
        path = unquote(parts.path)
        if "\x00" in path or any(ord(c) < 32 for c in path):
            raise LifecycleError(_("source: control characters are not allowed"), "source")
        return path
    return source


def resolve_source(source: str) -> Path:
    """The directory (or single file) `source` names, resolved, inside an artifact root; LifecycleError
    (field "source") for a relative path, a `..` component, a URI other than file://, a path outside every
    root (also through a symlink) and a path that does not exist."""
    path = _path_of(source)
    if not path.startswith("/"):
        raise LifecycleError(_("source: %(source)r is relative; give an absolute path") % {"source": source},
                             "source")
    if ".." in path.split("/"):
        raise LifecycleError(_("source: '..' is not allowed in %(source)r") % {"source": source}, "source")
    shown = path  # the messages name the path as the user gave it
    path = simulated_mount(path)
    roots = artifact_roots()
    if not roots:
        raise LifecycleError(_("source: no artifact root is configured (APPLIANCE_MODEL_ROOTS, or a shared "
                               "filesystem in the inventory)"), "source")
    # Containment before anything touches the path: a path outside the roots gets one answer whether or not
    # it exists (registration is no file-existence oracle), and the answer names no root's absolute path.
    outside = LifecycleError(_("source: %(path)s is not inside an artifact root (the appliance's model storage: "
                               "APPLIANCE_MODEL_ROOTS, or its shared filesystems)") % {"path": shown}, "source")
    lexical = Path(os.path.normpath(path))
    written = [*roots, *(Path(os.path.normpath(root)) for root in _configured_roots())]
    if not any(lexical.is_relative_to(root) for root in written):
        raise outside
    resolved = Path(os.path.realpath(path))
    if not any(resolved.is_relative_to(root) for root in roots):
        raise outside  # a link inside a root that leads out of every root, to something or to nothing
    if resolved in roots:
        raise LifecycleError(_("source: %(path)s is an artifact root itself; give the model's own directory")
                             % {"path": shown}, "source")
    if not os.path.lexists(path) or not resolved.exists():
        raise LifecycleError(_("source: %(path)s does not exist") % {"path": shown}, "source")
    if not (resolved.is_dir() or resolved.is_file()):
        raise LifecycleError(_("source: %(path)s is neither a directory nor a regular file") % {"path": shown},
                             "source")
    return resolved
