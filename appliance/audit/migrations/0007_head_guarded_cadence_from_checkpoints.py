from django.db import migrations


def install_triggers(apps, schema_editor):
    from appliance.audit import triggers

    triggers.install(schema_editor.connection)


def uninstall_triggers(apps, schema_editor):
    from appliance.audit import triggers

    triggers.uninstall(schema_editor.connection)


class Migration(migrations.Migration):
    """The chain head loses the checkpoint cadence (anyone who could write the row could push the
    next checkpoint far away): the cadence now comes from the settings and the last checkpoint.
    The head gets triggers of its own (it moves only forward, onto the records it names; it is never
    deleted) and checkpoints one on insert (at or below the head, naming the record's hash); on
    PostgreSQL every audit trigger fires ALWAYS, whatever session_replication_role says.

    SQLite rebuilds the head's table to drop its columns, which drops triggers: they are taken off
    first and put back last."""

    dependencies = [("audit", "0006_key_rotation")]

    operations = [
        migrations.RunPython(uninstall_triggers, install_triggers),
        migrations.RemoveField(model_name="chainhead", name="last_checkpoint_sequence"),
        migrations.RemoveField(model_name="chainhead", name="last_checkpoint_at"),
        migrations.RunPython(install_triggers, uninstall_triggers),
    ]
