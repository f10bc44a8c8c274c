""""No data" as a cause of the ledger: the seconds of a listed GPU for which no line came."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("analytics", "0004_cause_hour_fillfactor")]

    operations = [
        migrations.AddField(model_name=model, name="no_data_s",
                            field=models.FloatField(default=0.0, **({"help_text": "seconds of a listed GPU with no "
                                                                                   "line (no data)"}
                                                                    if model == "causehour" else {})))
        for model in ("causehour", "jobtotal", "pooluserhour")
    ]
