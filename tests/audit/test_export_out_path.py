"""`audit export --out` onto a symbolic link is refused with a clear message, nothing written."""

import pytest
from django.core.management import CommandError, call_command

from appliance import audit

MESSAGE = "is a symbolic link; name a new or empty directory that is not a link"


@pytest.mark.parametrize("target", ["empty-directory", "missing"])
def test_export_onto_a_symlink_is_refused(db, tmp_path, target):
    audit.record("task.run")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if target == "empty-directory":
        (elsewhere / "bundle").mkdir()
    link = tmp_path / "out"
    link.symlink_to(elsewhere / "bundle")
    with pytest.raises(CommandError) as refused:
        call_command("audit", "export", "--format", "jsonl", "--out", str(link))
    assert str(refused.value) == f"out: {link} {MESSAGE}"
    assert link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "keys") == ["elsewhere", "out"]
    if target == "empty-directory":
        assert list((elsewhere / "bundle").iterdir()) == []
    else:
        assert not (elsewhere / "bundle").exists()
    assert not audit_export_recorded()


def audit_export_recorded() -> bool:
    from appliance.audit.models import AuditRecord

    return AuditRecord.objects.filter(event="audit.export").exists()
