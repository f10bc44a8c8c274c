"""API tokens stored hashed (ApiToken) instead of DRF's plaintext authtoken table, which is dropped:
tokens issued before this migration stop working and their owners make new ones. Users remember who
made them and since when they hold their role (two-person rules)."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_initial'),
    ]

    operations = [
        migrations.AddField(
            model_name='user',
            name='created_by',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddField(
            model_name='user',
            name='role_since',
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        # Accounts that existed before this migration have held their role since they were made.
        migrations.RunSQL("UPDATE accounts_user SET role_since = date_joined", migrations.RunSQL.noop),
        migrations.CreateModel(
            name='ApiToken',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(blank=True, max_length=100)),
                ('prefix', models.CharField(help_text='public part of the token, shown in lists', max_length=16, unique=True)),
                ('digest', models.CharField(help_text='SHA-256 of the secret part, hex', max_length=64)),
                ('created', models.DateTimeField(default=django.utils.timezone.now)),
                ('expires', models.DateTimeField()),
                ('last_used', models.DateTimeField(blank=True, null=True)),
                ('revoked', models.DateTimeField(blank=True, null=True)),
                ('revoked_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='api_tokens', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'API token',
                'ordering': ['-created'],
            },
        ),
        # Plaintext tokens of rest_framework.authtoken (no longer installed) go with their table.
        migrations.RunSQL("DROP TABLE IF EXISTS authtoken_token", migrations.RunSQL.noop),
    ]
