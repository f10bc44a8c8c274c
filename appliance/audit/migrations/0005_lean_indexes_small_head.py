import uuid

from django.db import migrations, models


def install_triggers(apps, schema_editor):
    from appliance.audit import triggers

    triggers.install(schema_editor.connection)


def uninstall_triggers(apps, schema_editor):
    from appliance.audit import triggers

    triggers.uninstall(schema_editor.connection)


def restore_head_frontier(apps, schema_editor):
    """Going back to 0004, whose writers expect the head to carry the Merkle frontier of the
    whole log: rebuild it from the last checkpoint and the records since."""
    from appliance.audit import merkle
    from appliance.audit.checkpoints import prefix_frontier

    alias = schema_editor.connection.alias
    head = apps.get_model("audit", "ChainHead").objects.using(alias).filter(pk=1).first()
    if head is not None and head.sequence:
        head.merkle_frontier = merkle.frontier_to_json(prefix_frontier(head.sequence, using=alias))
        head.save(update_fields=["merkle_frontier"])


class Migration(migrations.Migration):
    """Appends get cheaper: the chain head loses its Merkle frontier (a wide row rewritten on every
    append; checkpoints now rebuild it from the previous checkpoint), and the record table keeps
    seven purpose-made indexes instead of eighteen (no pattern-ops copies, no unique indexes on
    values unique by construction, none on two-to-five-valued columns).

    SQLite rebuilds a table to change its columns' indexes, which drops its triggers: they are
    taken off first and put back last, so the table is never left without them after the migration."""

    dependencies = [
        ('audit', '0004_append_only_triggers'),
    ]

    operations = [
        migrations.RunPython(uninstall_triggers, install_triggers),
        migrations.RunPython(migrations.RunPython.noop, restore_head_frontier),
        migrations.RemoveField(
            model_name='chainhead',
            name='merkle_frontier',
        ),
        migrations.AlterField(
            model_name='auditrecord',
            name='actor_id',
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='auditrecord',
            name='actor_username',
            field=models.CharField(blank=True, max_length=150),
        ),
        migrations.AlterField(
            model_name='auditrecord',
            name='channel',
            field=models.CharField(choices=[('web', 'Web'), ('api', 'API'), ('cli', 'CLI'), ('task', 'Task'), ('system', 'System')], max_length=10),
        ),
        migrations.AlterField(
            model_name='auditrecord',
            name='event',
            field=models.CharField(max_length=100),
        ),
        migrations.AlterField(
            model_name='auditrecord',
            name='hash',
            field=models.CharField(max_length=64),
        ),
        migrations.AlterField(
            model_name='auditrecord',
            name='outcome',
            field=models.CharField(choices=[('success', 'Success'), ('failure', 'Failure'), ('denied', 'Denied')], max_length=10),
        ),
        migrations.AlterField(
            model_name='auditrecord',
            name='request_id',
            field=models.CharField(blank=True, max_length=128),
        ),
        migrations.AlterField(
            model_name='auditrecord',
            name='target_type',
            field=models.CharField(blank=True, max_length=100),
        ),
        migrations.AlterField(
            model_name='auditrecord',
            name='timestamp',
            field=models.DateTimeField(),
        ),
        migrations.AlterField(
            model_name='auditrecord',
            name='uuid',
            field=models.UUIDField(default=uuid.uuid4, editable=False),
        ),
        migrations.AddIndex(
            model_name='auditrecord',
            index=models.Index(fields=['timestamp'], name='audit_record_time'),
        ),
        migrations.AddIndex(
            model_name='auditrecord',
            index=models.Index(fields=['event', 'sequence'], name='audit_record_event'),
        ),
        migrations.AddIndex(
            model_name='auditrecord',
            index=models.Index(fields=['actor_username', 'sequence'], name='audit_record_actor'),
        ),
        migrations.AddIndex(
            model_name='auditrecord',
            index=models.Index(fields=['actor_id', 'sequence'], name='audit_record_actor_id'),
        ),
        migrations.AddIndex(
            model_name='auditrecord',
            index=models.Index(fields=['target_type', 'target_id', 'sequence'], name='audit_record_target'),
        ),
        migrations.AddIndex(
            model_name='auditrecord',
            index=models.Index(fields=['request_id'], name='audit_record_request'),
        ),
        migrations.AddIndex(
            model_name='auditrecord',
            index=models.Index(condition=models.Q(('outcome', 'success'), _negated=True), fields=['outcome', 'sequence'], name='audit_record_not_success'),
        ),
        migrations.RunPython(install_triggers, uninstall_triggers),
    ]
