"""The four-eyes cooling period's default (settings.py): a day on a production install, none on a development
or demo appliance (whose accounts are all new: the demo's story approves its own promotions), and the variable
sets either. Read from the settings module in a fresh interpreter, as each kind of install starts it."""

import os
import subprocess
import sys

import pytest
from django.conf import settings

READ = ("import django; django.setup(); from django.conf import settings; "
        "print(int(settings.FOUR_EYES_COOLING_PERIOD.total_seconds()))")


def cooling_seconds(tmp_path, **env) -> int:
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("APPLIANCE_ENV", "APPLIANCE_FOUR_EYES_COOLING_SECONDS", "DATABASE_URL")}
    environment.update(APPLIANCE_STATE_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="appliance.settings",
                       DJANGO_SECRET_KEY="x" * 64, DJANGO_ALLOWED_HOSTS="appliance.example", **env)
    result = subprocess.run([sys.executable, "-c", READ], env=environment, cwd=settings.BASE_DIR,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return int(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("env, seconds", [
    ({"APPLIANCE_ENV": "production"}, 86400),
    ({}, 0),
    ({"APPLIANCE_ENV": "development"}, 0),
    ({"APPLIANCE_ENV": "production", "APPLIANCE_FOUR_EYES_COOLING_SECONDS": "3600"}, 3600),
    ({"APPLIANCE_FOUR_EYES_COOLING_SECONDS": "7200"}, 7200),
])
def test_the_cooling_period_is_a_day_on_production_and_none_on_a_demo(tmp_path, env, seconds):
    assert cooling_seconds(tmp_path, **env) == seconds
