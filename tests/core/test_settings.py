import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def manage(*args, env_extra: dict, tmp_path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL", "APPLIANCE_"))}
    env.update({"APPLIANCE_STATE_DIR": str(tmp_path / "state")}, **env_extra)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_deploy_check_passes_with_production_settings(tmp_path):
    result = manage("check", "--deploy", "--fail-level", "WARNING", tmp_path=tmp_path, env_extra={
        "APPLIANCE_ENV": "production",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(60),
        "DJANGO_ALLOWED_HOSTS": "appliance.example",
    })
    assert result.returncode == 0, result.stdout + result.stderr


def test_deploy_check_fails_on_development_defaults(tmp_path):
    result = manage("check", "--deploy", "--fail-level", "WARNING", tmp_path=tmp_path, env_extra={})
    assert result.returncode != 0
    assert "SECURE_HSTS_SECONDS" in result.stderr + result.stdout


def test_embedded_defaults_keep_everything_in_the_state_dir(tmp_path):
    result = manage("shell", "-c", "from django.conf import settings as s; "
                    "print(s.DATABASES['default']['NAME']); print(s.SECRETS_KEY_FILE)",
                    tmp_path=tmp_path, env_extra={})
    assert result.returncode == 0, result.stderr
    state = str((tmp_path / "state").resolve())
    lines = [line for line in result.stdout.splitlines() if line.startswith("/")]
    assert lines and all(line.startswith(state) for line in lines)


def test_database_url_switches_to_postgresql(tmp_path):
    result = manage("shell", "-c", "from django.conf import settings as s; print(s.DATABASES['default']['ENGINE'])",
                    tmp_path=tmp_path, env_extra={"DATABASE_URL": "postgres://u@127.0.0.1:5432/x"})
    assert result.returncode == 0, result.stderr
    assert "django.db.backends.postgresql" in result.stdout


def test_debug_is_off_unless_a_developer_turns_it_on(tmp_path):
    show = "from django.conf import settings as s; print('DEBUG', s.DEBUG)"
    default = manage("shell", "-c", show, tmp_path=tmp_path, env_extra={})
    assert default.returncode == 0, default.stderr
    assert "DEBUG False" in default.stdout
    development = manage("shell", "-c", show, tmp_path=tmp_path, env_extra={"APPLIANCE_ENV": "development"})
    assert "DEBUG False" in development.stdout
    developer = manage("shell", "-c", show, tmp_path=tmp_path, env_extra={"DJANGO_DEBUG": "1"})
    assert "DEBUG True" in developer.stdout
