"""BMC passwords become named credentials bound to their endpoints.

Each distinct login the BMCs of an appliance held (user name, stored password, CA file) becomes one
credential named after the appliance (`<appliance>-bmc`, then `-2`, `-3`...), holding the password
that was stored encrypted and bound to the endpoints of the BMCs that used it; the BMCs then name it.
The old fields go in 0004 (PostgreSQL alters no table with changes pending in the same transaction).
"""

import django.db.models.deletion
from django.db import migrations, models

import appliance.core.fields
from appliance.inventory.endpoints import endpoint_of


def bmc_logins_to_credentials(apps, schema_editor):
    BMC = apps.get_model("inventory", "BMC")
    Credential = apps.get_model("inventory", "Credential")
    groups: dict[tuple, list] = {}
    for bmc in BMC.objects.select_related("node__appliance").order_by("pk"):
        key = (bmc.node.appliance.name, bmc.username, bmc.password, bmc.ca_file)
        groups.setdefault(key, []).append(bmc)
    taken = set(Credential.objects.values_list("name", flat=True))
    for (appliance_name, username, password, ca_file), bmcs in groups.items():
        base = f"{appliance_name[:55].strip('-_') or 'site'}-bmc".lower().replace("_", "-")
        name, suffix = base, 2
        while name in taken:
            name, suffix = f"{base}-{suffix}", suffix + 1
        taken.add(name)
        endpoints = []
        for bmc in bmcs:
            try:
                endpoint = endpoint_of(bmc.url)
            except ValueError:
                continue  # a URL that names no endpoint: the BMC keeps the credential but is never sent it
            if endpoint not in endpoints:
                endpoints.append(endpoint)
        credential = Credential.objects.create(
            name=name, kind="bmc", username=username or "", secret=password or "", endpoints=endpoints,
            ca_file=ca_file or "",
            description=f"carried over from the BMC passwords of appliance {appliance_name}")
        BMC.objects.filter(pk__in=[b.pk for b in bmcs]).update(credential=credential)


class Migration(migrations.Migration):

    dependencies = [
        ("inventory", "0002_node_management_address_released_on_retire"),
    ]

    operations = [
        migrations.CreateModel(
            name="Credential",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("created", models.DateTimeField(auto_now_add=True)),
                ("updated", models.DateTimeField(auto_now=True)),
                ("name", models.SlugField(max_length=63, unique=True)),
                ("kind", models.CharField(choices=[("bmc", "BMC login (Redfish user name and password)")],
                                          default="bmc", max_length=20)),
                ("description", models.TextField(blank=True)),
                ("username", models.CharField(max_length=100)),
                ("secret", appliance.core.fields.EncryptedTextField(blank=True)),
                ("endpoints", models.JSONField(blank=True, default=list,
                                               help_text="the endpoints (scheme://host:port) the secret may be sent to")),
                ("ca_file", models.CharField(blank=True, max_length=500,
                                             help_text="CA bundle that verifies the endpoints' TLS certificates "
                                                       "(default: the system's)")),
            ],
            options={"ordering": ["name"]},
        ),
        migrations.AddField(
            model_name="bmc",
            name="credential",
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT, related_name="bmcs",
                                    to="inventory.credential"),
        ),
        migrations.RunPython(bmc_logins_to_credentials, migrations.RunPython.noop),
    ]
