"""The database queue's tables (kombu's SQLAlchemy transport: appliance.core.queue) and the database
cache's table, made by migrate as the tables' owner, so the runtime role's grants cover them."""

from django.conf import settings
from django.core.management import call_command
from django.db import migrations

from appliance.core import queue


def create_queue_tables(apps, schema_editor):
    connection = schema_editor.connection
    if queue.MESSAGE_TABLE in connection.introspection.table_names():
        return  # made by kombu itself before this migration existed (a broker URL pointed here)
    for statement in queue.ddl(connection.vendor):
        schema_editor.execute(statement)


def drop_queue_tables(apps, schema_editor):
    for statement in queue.ddl(schema_editor.connection.vendor, drop=True):
        schema_editor.execute(statement)


def create_cache_tables(apps, schema_editor):
    # Every database cache of CACHES (the default one unless CACHE_URL names Redis); idempotent.
    if any(cache["BACKEND"].endswith("db.DatabaseCache") for cache in settings.CACHES.values()):
        call_command("createcachetable", database=schema_editor.connection.alias, verbosity=0)


class Migration(migrations.Migration):

    dependencies = [("core", "0001_appliance_settings")]

    operations = [
        migrations.RunPython(create_queue_tables, drop_queue_tables, elidable=False),
        migrations.RunPython(create_cache_tables, migrations.RunPython.noop, elidable=False),
    ]
