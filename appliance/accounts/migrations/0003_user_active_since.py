"""Since when an account is enabled (re-enabling it starts the four-eyes cooling period again)."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0002_tokens_hashed_account_origin'),
    ]

    operations = [
        migrations.AddField(
            model_name='user',
            name='active_since',
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        # Accounts that existed before this migration have been enabled since they were made.
        migrations.RunSQL("UPDATE accounts_user SET active_since = date_joined", migrations.RunSQL.noop),
    ]
