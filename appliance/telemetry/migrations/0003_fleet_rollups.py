"""Levels of node rows per 5 minutes, per 6 hours and per day, and the fleet's rows (FleetRollup): created, then summed from the node rows already kept, so the Overview's
totals over the days before the upgrade read them like the ones folded after it."""

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import Count, Sum

SUMS = ("gpu_power_w", "ib_tx_bps", "ib_rx_bps", "fs_read_bps", "fs_write_bps")


def sum_existing_node_rows(apps, schema_editor):
    """What services.fold_fleet does, over every bucket kept (one aggregate query, written in batches)."""
    node_rollup = apps.get_model("telemetry", "NodeRollup")
    fleet_rollup = apps.get_model("telemetry", "FleetRollup")
    node = apps.get_model("inventory", "Node")
    sums = (node_rollup.objects.filter(node__in=node.objects.filter(gpus__isnull=False))
            .order_by().values("node__appliance", "step", "start")
            .annotate(nodes_=Count("id"), util_sum=Sum("gpu_util"), util_count=Count("gpu_util"),
                      **{f"{name}_": Sum(name) for name in SUMS}))
    batch = []
    for row in sums.iterator(chunk_size=2000):
        batch.append(fleet_rollup(appliance_id=row["node__appliance"], step=row["step"], start=row["start"],
                                  nodes=row["nodes_"], gpu_util_sum=row["util_sum"], gpu_util_count=row["util_count"],
                                  **{name: row[f"{name}_"] for name in SUMS}))
        if len(batch) >= 2000:
            fleet_rollup.objects.bulk_create(batch)
            batch = []
    fleet_rollup.objects.bulk_create(batch)


class Migration(migrations.Migration):

    dependencies = [
        ('inventory', '0008_influx_credential_kinds'),
        ('telemetry', '0002_fleet_levels_and_indexes'),
    ]

    operations = [
        migrations.AlterField(
            model_name='gpurollup',
            name='step',
            field=models.PositiveIntegerField(choices=[(60, 'per minute'), (300, 'per 5 minutes'), (600, 'per 10 minutes'), (3600, 'per hour'), (21600, 'per 6 hours'), (86400, 'per day')], default=60),
        ),
        migrations.AlterField(
            model_name='noderollup',
            name='step',
            field=models.PositiveIntegerField(choices=[(60, 'per minute'), (300, 'per 5 minutes'), (600, 'per 10 minutes'), (3600, 'per hour'), (21600, 'per 6 hours'), (86400, 'per day')], default=60),
        ),
        migrations.CreateModel(
            name='FleetRollup',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('step', models.PositiveIntegerField(choices=[(60, 'per minute'), (300, 'per 5 minutes'), (600, 'per 10 minutes'), (3600, 'per hour'), (21600, 'per 6 hours'), (86400, 'per day')], default=60)),
                ('start', models.DateTimeField()),
                ('nodes', models.PositiveIntegerField(default=0, help_text='node rows summed (nodes with GPUs that reported)')),
                ('gpu_util_sum', models.FloatField(help_text="sum of the nodes' mean GPU utilization, %", null=True)),
                ('gpu_util_count', models.PositiveIntegerField(default=0, help_text='node rows with a GPU utilization')),
                ('gpu_power_w', models.FloatField(help_text='GPU power of every node, summed', null=True)),
                ('ib_tx_bps', models.FloatField(help_text='InfiniBand transmitted, every node, bytes/s', null=True)),
                ('ib_rx_bps', models.FloatField(null=True)),
                ('fs_read_bps', models.FloatField(help_text='filesystem client reads, every node, bytes/s', null=True)),
                ('fs_write_bps', models.FloatField(null=True)),
                ('appliance', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='fleet_rollups', to='inventory.appliance')),
            ],
            options={
                'ordering': ['appliance', 'step', 'start'],
                'indexes': [models.Index(fields=['step', 'start'], name='telemetry_fleet_step_start')],
                'constraints': [models.UniqueConstraint(fields=('appliance', 'step', 'start'), name='telemetry_fleet_rollup_bucket')],
            },
        ),
        migrations.RunPython(sum_existing_node_rows, migrations.RunPython.noop),
    ]
