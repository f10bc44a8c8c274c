from django.db import migrations, models


def install_triggers(apps, schema_editor):
    from appliance.audit import triggers

    triggers.install(schema_editor.connection)


class Migration(migrations.Migration):
    """Signing key rotations: an append-only table of handovers, each signed by the old and the new key."""

    dependencies = [("audit", "0005_lean_indexes_small_head")]
    operations = [
        migrations.CreateModel(
            name="AuditKeyRotation",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("old_key_id", models.CharField(max_length=16)),
                ("old_public_key", models.TextField()),
                ("new_key_id", models.CharField(max_length=16, unique=True)),
                ("new_public_key", models.TextField()),
                ("tree_size", models.BigIntegerField()),
                ("timestamp", models.DateTimeField()),
                ("old_signature", models.CharField(max_length=128)),
                ("new_signature", models.CharField(max_length=128)),
            ],
            options={"ordering": ["timestamp", "id"]},
        ),
        migrations.RunPython(install_triggers, migrations.RunPython.noop),
    ]
