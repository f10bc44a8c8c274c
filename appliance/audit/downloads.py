"""An export bundle as one zip download, for the portal's export page and the API.

The bundle itself (records in the chosen format, manifest, checkpoints, public key) comes from
appliance.audit.export.export_bundle, which also records `audit.export`; this only packs it.
"""

import tempfile
import zipfile
from datetime import UTC, datetime
from pathlib import Path

from .export import FORMATS, ExportError, export_bundle

__all__ = ["EXPORT_FORMATS", "ExportError", "export_zip"]

_LABELS = {
    "jsonl": "JSON Lines (the hash-chained records)",
    "cef": "CEF (ArcSight)",
    "syslog": "Syslog (RFC 5424, structured data)",
    "ocsf": "OCSF (JSON Lines)",
    "csv": "CSV",
}
# The formats of `manage.py audit export --format`, as (name, label) choices.
EXPORT_FORMATS = tuple((name, _LABELS.get(name, name)) for name in FORMATS)


def export_zip(fmt: str, since: datetime | None = None, until: datetime | None = None, selection=None):
    """Returns (open binary file positioned at 0, download file name, manifest).

    The file is an anonymous temporary file: it disappears when the response closes it.
    Raises ExportError for a range or format the log cannot export.
    """
    with tempfile.TemporaryDirectory(prefix="audit-export-") as workdir:
        bundle_dir = Path(workdir) / "bundle"
        bundle_dir.mkdir()
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        name = f"audit-{fmt}-{stamp}"
        # The record names the download, not this temporary folder (gone when the response ends).
        manifest = export_bundle(bundle_dir, fmt, since=since, until=until, destination=f"download {name}.zip",
                                 selection=selection)
        archive = tempfile.TemporaryFile()
        try:
            with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
                for path in sorted(p for p in bundle_dir.rglob("*") if p.is_file()):
                    zf.write(path, f"{name}/{path.relative_to(bundle_dir).as_posix()}")
        except BaseException:
            archive.close()
            raise
    archive.seek(0)
    return archive, f"{name}.zip", manifest
