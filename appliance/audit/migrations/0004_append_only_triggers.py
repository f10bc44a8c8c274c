from django.db import migrations


def install(apps, schema_editor):
    from appliance.audit import triggers

    triggers.install(schema_editor.connection)


def uninstall(apps, schema_editor):
    from appliance.audit import triggers

    triggers.uninstall(schema_editor.connection)


class Migration(migrations.Migration):
    """UPDATE and DELETE on the audit tables fail in the database itself, raw SQL included
    (SQLite: RAISE(ABORT); PostgreSQL: a plpgsql function raising an exception)."""

    dependencies = [("audit", "0003_checkpoints_tombstones_retention")]
    operations = [migrations.RunPython(install, uninstall)]
