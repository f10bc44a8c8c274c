"""The BMC's own login fields go: its credential (0003) holds them. The file and environment
references (password_ref) go with them: nothing reads a secret from a path or a variable any more."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("inventory", "0003_credentials"),
    ]

    operations = [
        migrations.RemoveField(model_name="bmc", name="ca_file"),
        migrations.RemoveField(model_name="bmc", name="password"),
        migrations.RemoveField(model_name="bmc", name="password_ref"),
        migrations.RemoveField(model_name="bmc", name="username"),
        migrations.AlterField(
            model_name="bmc",
            name="credential",
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="bmcs",
                                    to="inventory.credential"),
        ),
    ]
