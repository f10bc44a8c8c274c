"""Settings of the appliance management suite.

Every setting comes from an environment variable with a documented default (see README.md,
"Configuration"). With nothing set the suite runs on its embedded defaults: SQLite and the
secret key in APPLIANCE_STATE_DIR, background work on an in-process worker pool, no InfluxDB,
the simulated appliance.
"""

import os
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from appliance.core import queue as _queue
from appliance.core.addresses import parse_trusted_proxies
from appliance.core.files import create_once, make_private, private_directory
from appliance.core.resources import DATA_ROOT, PACKAGE_DIR, default_state_dir

# The folder of templates/, playbooks/ and firmware/: the repository's root in a checkout,
# appliance/_data in an installed wheel (appliance/core/resources.py).
BASE_DIR = DATA_ROOT


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


# The state directory holds the database, keys and logs: this OS user only (0700, files 0600).
# Unset: the checkout's var/; an installed wheel's is /var/lib/appliance (root) or ~/.local/state/appliance.
STATE_DIR = private_directory(Path(os.environ.get("APPLIANCE_STATE_DIR") or default_state_dir()).resolve())
KEYS_DIR = private_directory(STATE_DIR / "keys")
LOG_DIR = private_directory(STATE_DIR / "logs")

# "production" turns on the hardened transport and cookie settings that `check --deploy` asks for.
APPLIANCE_ENV = os.environ.get("APPLIANCE_ENV", "development")
PRODUCTION = APPLIANCE_ENV == "production"


def _secret_key() -> str:
    configured = os.environ.get("DJANGO_SECRET_KEY")
    if configured:
        return configured
    key_file = KEYS_DIR / "django-secret-key"
    create_once(key_file, secrets.token_urlsafe(64))
    return key_file.read_text().strip()


SECRET_KEY = _secret_key()
# Debug pages show settings and code to whoever triggers an error: only a developer turns them on.
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
# Reverse proxies whose X-Forwarded-For is believed (addresses or networks); nobody's by default.
TRUSTED_PROXIES = parse_trusted_proxies(env_list("APPLIANCE_TRUSTED_PROXIES", []))

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "axes",
    "appliance.core",
    "appliance.accounts",
    "appliance.audit",
    "appliance.inventory",
    "appliance.simulation",
    "appliance.provisioning",
    "appliance.telemetry",
    "appliance.analytics",
    "appliance.lending",
    "appliance.traces",
    "appliance.partitioning",
    "appliance.lifecycle",
    "appliance.portal",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "appliance.core.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "appliance.core.middleware.RequestContextMiddleware",
    "appliance.core.querylimits.RefuseNulInQueryMiddleware",
    "appliance.audit.capture.requests.AuditRequestMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # After sessions, before CommonMiddleware: the portal's language (cookie, Accept-Language); the API's is English.
    "appliance.core.i18n.PortalLocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "appliance.core.middleware.SessionLimitsMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "appliance.urls"
WSGI_APPLICATION = "appliance.wsgi.application"
ASGI_APPLICATION = "appliance.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "appliance.portal.context_processors.navigation",
            ],
        },
    },
]

# Embedded default: SQLite in the state directory. DATABASE_URL (postgres://...) switches.
DATABASES = {
    "default": dj_database_url.config(
        env="DATABASE_URL",
        default=f"sqlite:///{STATE_DIR / 'appliance.sqlite3'}",
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 0),
    )
}
# PostgreSQL with two roles: DATABASE_URL is the runtime role (portal, workers, commands), which owns
# nothing; DATABASE_MIGRATE_URL is the tables' owner, used by migrate (which then grants the runtime
# role what it needs), `audit install-triggers` and `audit retention archive` (appliance/audit/dbroles.py).
DATABASE_MIGRATE_URL = os.environ.get("DATABASE_MIGRATE_URL", "")
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # SQLite gives its WAL and shared-memory files the database file's mode: make that 0600 before the
    # first connection (and tighten a database made before this rule); core.apps checks every connection.
    if DATABASES["default"]["NAME"] not in ("", ":memory:"):
        _sqlite_file = Path(DATABASES["default"]["NAME"])
        create_once(_sqlite_file, b"")
        make_private(_sqlite_file, Path(f"{_sqlite_file}-wal"), Path(f"{_sqlite_file}-shm"))
    # WAL and a busy timeout let the in-process workers write while the portal reads.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 30, "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
         "transaction_mode": "IMMEDIATE"}
    )
    DATABASES["default"]["TEST"] = {"NAME": str(STATE_DIR / "test-appliance.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_USER_MODEL = "accounts.User"
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
     "OPTIONS": {"min_length": env_int("APPLIANCE_PASSWORD_MIN_LENGTH", 12)}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
    {"NAME": "appliance.accounts.passwords.RepeatedCharacterValidator"},
]
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "portal:overview"
LOGOUT_REDIRECT_URL = "accounts:login"

# Failed-login throttling (django-axes): lock the username after N failures for the cool-off.
AXES_FAILURE_LIMIT = env_int("APPLIANCE_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(seconds=env_int("APPLIANCE_LOGIN_COOLOFF_SECONDS", 900))
AXES_LOCKOUT_PARAMETERS = ["username"]
AXES_RESET_ON_SUCCESS = True
AXES_ENABLE_ACCESS_FAILURE_LOG = True
AXES_LOCKOUT_TEMPLATE = "accounts/locked_out.html"
# Four-eyes decisions (model promotions, audit retention, lending plans) count an account only once this
# long has passed since it was created, re-enabled or given its role (accounts.services): a day on a
# production install (APPLIANCE_ENV=production, what `install --production` writes). A development or demo
# appliance (the README's bootstrap) starts with every account new, and its demo story approves its own
# models' promotions at once: no cooling period there unless the variable sets one. The other parts of the
# rule (two people, no creator link either way) hold everywhere.
FOUR_EYES_COOLING_PERIOD = timedelta(seconds=max(0, env_int("APPLIANCE_FOUR_EYES_COOLING_SECONDS",
                                                            24 * 3600 if PRODUCTION else 0)))
AXES_CLIENT_IP_CALLABLE = "appliance.core.addresses.client_address"
AXES_VERBOSE = False
# Lockout is per username on purpose: an appliance's operators share a few jump hosts, and locking
# an address would lock all of them out at once. The username lock cannot be bypassed by rotating
# user agents or cookies, which is what axes.W006 warns about for other parameter sets.
SILENCED_SYSTEM_CHECKS = ["axes.W006"]

# Sessions end after this many seconds without a request, this many seconds after their login however
# busy (core.middleware.SessionLimitsMiddleware), and at browser close.
SESSION_IDLE_TIMEOUT = env_int("APPLIANCE_SESSION_IDLE_TIMEOUT", 1800)
SESSION_COOKIE_AGE = env_int("APPLIANCE_SESSION_MAX_AGE", 12 * 3600)
# API tokens (appliance.accounts.tokens): stored as a SHA-256 digest, valid this many days.
TOKEN_TTL_DAYS = env_int("APPLIANCE_TOKEN_TTL_DAYS", 90)
SESSION_EXPIRE_AT_BROWSER_CLOSE = True
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = False

if PRODUCTION:
    SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

LANGUAGE_CODE = "en"
TIME_ZONE = os.environ.get("APPLIANCE_TIME_ZONE", "UTC")
# The portal's languages: English (the default and the language of the API, audit log and exports), Russian.
USE_I18N = True
LANGUAGES = [("en", "English"), ("ru", "Русский")]
LOCALE_PATHS = [PACKAGE_DIR / "locale"]
# The language switch's cookie: no script reads it, no other site sends it, https only in production.
LANGUAGE_COOKIE_HTTPONLY = True
LANGUAGE_COOKIE_SAMESITE = "Lax"
LANGUAGE_COOKIE_SECURE = PRODUCTION
USE_TZ = True
# Times and dates on every page: ISO 8601 with the zone (2026-12-01 10:15:02 UTC), in every language;
# the per-language format modules in appliance/formats/ take precedence over Django's locale formats.
DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
DATE_FORMAT = SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
FORMAT_MODULE_PATH = ["appliance.formats"]

STATIC_URL = "static/"
STATICFILES_DIRS: list = []
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT", STATE_DIR / "static"))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # collectstatic fills it; whitenoise expects it to exist
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"
                    if PRODUCTION else "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = not PRODUCTION
MEDIA_ROOT = STATE_DIR / "media"
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
# API request bodies are untrusted: JSON beyond these limits is refused with a 400.
API_JSON_MAX_BYTES = env_int("APPLIANCE_API_JSON_MAX_BYTES", 1024 * 1024)
API_JSON_MAX_DEPTH = env_int("APPLIANCE_API_JSON_MAX_DEPTH", 32)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "appliance.accounts.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["appliance.core.permissions.RolePermission"],
    "DEFAULT_FILTER_BACKENDS": [
        "appliance.core.filters.FilterBackend",
        "rest_framework.filters.OrderingFilter",
        "rest_framework.filters.SearchFilter",
    ],
    "DEFAULT_PAGINATION_CLASS": "appliance.core.api.Pagination",
    "DEFAULT_RENDERER_CLASSES": ["appliance.core.renderers.JSONRenderer", "rest_framework.renderers.BrowsableAPIRenderer"],
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "appliance.core.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "appliance.core.api.exception_handler",
    # Request bodies are JSON (the site import also takes YAML and uploads: its view says so). Form
    # encodings are not offered: DRF reads an empty form field of an optional field as left out.
    "DEFAULT_PARSER_CLASSES": ["appliance.core.parsers.JSONParser"],
    "DEFAULT_THROTTLE_RATES": {"login": "10/min"},
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Appliance management API",
    "DESCRIPTION": "Inventory, provisioning, partitioning, telemetry, model lifecycle and audit of the AI appliance.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema maps every endpoint of the appliance: only signed-in users may read it.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Choice sets that share a field name across models get a name each (else spectacular warns).
    "ENUM_NAME_OVERRIDES": {
        "NodeStateEnum": "appliance.inventory.states.NodeState",
        "NetworkKindEnum": "appliance.inventory.models.Network.Kind",
        "SwitchKindEnum": "appliance.inventory.models.Switch.Kind",
        "PoolKindEnum": "appliance.inventory.models.Pool.Kind",
        "NodeRoleEnum": "appliance.inventory.models.Node.Role",
        "UserRoleEnum": "appliance.core.roles.Role",
        "RunStateEnum": "appliance.provisioning.states.RunState",
        "StageStateEnum": "appliance.provisioning.states.StageState",
        "RunKindEnum": "appliance.provisioning.models.Run.Kind",
    },
}

# Background work. With CELERY_BROKER_URL unset the suite needs no broker server: tasks are queued in
# the appliance's own database (appliance/core/queue.py) and run by a bounded worker pool inside the
# process (appliance/core/dispatch.py), so a web request never waits for them and queued work survives
# a restart. With a broker they go to `celery -A appliance worker`: Redis (redis://), RabbitMQ (amqp://),
# or the database queue itself (sqla+postgresql+psycopg://..., what `appliance install --production` writes).
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "")
CELERY_BROKER_TRANSPORT_OPTIONS = _queue.transport_options(CELERY_BROKER_URL)
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND", "") or None
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TRACK_STARTED = True
EMBEDDED_WORKERS = env_int("APPLIANCE_EMBEDDED_WORKERS", 2)

# The cache holds rate-limit counters and the counts of refused anonymous requests, shared by every
# process of the appliance (portal workers, Celery workers): by default a table of the appliance's
# database (made by migrate), or Redis with CACHE_URL=redis://host:6379/1. CACHE_URL=locmem:// keeps
# them in each process's memory (a single process only).
CACHE_URL = os.environ.get("CACHE_URL", "")
if CACHE_URL.startswith(("redis://", "rediss://", "unix://")):
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}}
elif CACHE_URL == "locmem://":
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "appliance",
                          "OPTIONS": {"MAX_ENTRIES": 100_000}}}
elif CACHE_URL:
    raise ImproperlyConfigured(f"CACHE_URL: expected redis://, rediss://, unix:// or locmem://, "
                               f"got {CACHE_URL.split(':')[0]}:")
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "appliance_cache",
                          "OPTIONS": {"MAX_ENTRIES": 100_000}}}
# Refused anonymous requests are counted in this cache per source and minute, and one record per
# source and minute is written once the minute is over (appliance/audit/capture/refusals.py).
REFUSAL_COUNTER_CACHE = "default"
REFUSAL_COUNTER_RETENTION_MINUTES = env_int("AUDIT_REFUSAL_COUNTER_RETENTION_MINUTES", 24 * 60)

# Provisioning watchdog: a running run whose heartbeat is older than this is failed (its worker died);
# a run no worker picked up within the pending timeout is failed too.
PROVISIONING_HEARTBEAT_TIMEOUT = env_int("PROVISIONING_HEARTBEAT_TIMEOUT", 60)
PROVISIONING_PENDING_TIMEOUT = env_int("PROVISIONING_PENDING_TIMEOUT", 6 * 3600)

INFLUXDB = {
    "url": os.environ.get("INFLUXDB_URL", ""),
    "token": os.environ.get("INFLUXDB_TOKEN", ""),
    "org": os.environ.get("INFLUXDB_ORG", "appliance"),
    "bucket": os.environ.get("INFLUXDB_BUCKET", "telemetry"),
}
# How long the appliance keeps its own telemetry rollups (days): per-minute rows for recent days, per-hour
# rows (folded from them) for a year; hardware events as long as the per-hour rows.
TELEMETRY_RETENTION = {
    "minute_days": env_int("APPLIANCE_TELEMETRY_MINUTE_DAYS", 14),
    "hour_days": env_int("APPLIANCE_TELEMETRY_HOUR_DAYS", 365),
}
# How often the attribution clock adds the complete minutes of GPU rollups to the analytics ledger.
ANALYTICS_ATTRIBUTE_EVERY_SECONDS = env_int("APPLIANCE_ANALYTICS_ATTRIBUTE_EVERY_SECONDS", 60)
# Where the nodes' collectors send their rollups, and the CA (a PEM file) they trust for it when it is https:
# `appliance install --production` writes the portal's own URL and certificate here. Unset: the monitoring
# stage derives the URL (README "The monitoring stage") and the collectors trust the system's CAs.
TELEMETRY_INGEST_URL = os.environ.get("APPLIANCE_TELEMETRY_INGEST_URL", "")
TELEMETRY_INGEST_CA_FILE = os.environ.get("APPLIANCE_TELEMETRY_INGEST_CA_FILE", "")

# Audit log: signed checkpoints every N records or T seconds. The retention floor is not here: it is
# the appliance's setting in its database (appliance.audit.retention), whatever a caller exports.
AUDIT_CHECKPOINT_EVERY_RECORDS = env_int("AUDIT_CHECKPOINT_EVERY_RECORDS", 1000)
# A signed checkpoint at least this often while records are unsigned: on append, and on a clock
# (Celery beat, or the embedded worker's timer when no broker is set) for an idle appliance.
AUDIT_CHECKPOINT_EVERY_SECONDS = env_int("AUDIT_CHECKPOINT_EVERY_SECONDS", 60)
AUDIT_SIGNING_KEY_FILE = Path(os.environ.get("AUDIT_SIGNING_KEY_FILE", KEYS_DIR / "audit-signing.key"))
# Every signed checkpoint is also appended here (0600, append-only) and, when set, sent to syslog
# (a socket path such as /dev/log, or udp://host:port / tcp://host:port): see appliance/audit/witness.py.
AUDIT_WITNESS_FILE = Path(os.environ.get("AUDIT_WITNESS_FILE", STATE_DIR / "audit" / "witness.jsonl"))
AUDIT_WITNESS_SYSLOG = os.environ.get("AUDIT_WITNESS_SYSLOG", "")

# Encryption of secrets at rest (BMC passwords): a Fernet key file outside the database.
SECRETS_KEY_FILE = Path(os.environ.get("APPLIANCE_SECRETS_KEY_FILE", KEYS_DIR / "secrets.key"))

SIMULATION_DIR = STATE_DIR / "simulation"

# The model registry (appliance/lifecycle). Where a version's files may be registered from: the directories
# listed here (os.pathsep-separated), or else the appliance's parallel filesystems (on a simulated appliance,
# SIMULATION_DIR/filesystems/<name>, the directory that stands for each shared filesystem); lifecycle/roots.py.
LIFECYCLE_ARTIFACT_ROOTS = [Path(p) for p in os.environ.get("APPLIANCE_MODEL_ROOTS", "").split(os.pathsep) if p]
# A promotion request (to production) expires without a decision after this many hours.
LIFECYCLE_REQUEST_TTL_HOURS = env_int("APPLIANCE_MODEL_REQUEST_TTL_HOURS", 72)
# Every registered version's files are re-hashed in full this often (seconds); a quick check (size, mtime,
# inode) and the signature precede every deployment whatever this says.
LIFECYCLE_FULL_VERIFY_EVERY_SECONDS = env_int("APPLIANCE_MODEL_FULL_VERIFY_EVERY_SECONDS", 86400)
# The model-signing key (an EC P-256 private key, PEM, made on first use) and the public key auditors verify with.
LIFECYCLE_SIGNING_KEY_FILE = Path(os.environ.get("APPLIANCE_MODEL_SIGNING_KEY_FILE", KEYS_DIR / "model-signing.pem"))
# Deployments on the inference pool: the registry its serving images come from (an air-gapped appliance's
# own), and how long a rollout may take to become healthy before it fails (lifecycle/manifests.py, deployments.py).
LIFECYCLE_IMAGE_REGISTRY = os.environ.get("APPLIANCE_IMAGE_REGISTRY", "registry.appliance.local:5000")
LIFECYCLE_ROLLOUT_DEADLINE_SECONDS = env_int("APPLIANCE_MODEL_ROLLOUT_DEADLINE_SECONDS", 600)
# The package repository the nodes install from (manage.py repository build; README "Air-gapped installs").
REPOSITORY_DIR = Path(os.environ.get("APPLIANCE_REPOSITORY_DIR", STATE_DIR / "repository")).resolve()
PLAYBOOKS_DIR = BASE_DIR / "playbooks"
# The collection appliance.hgx: the stages' modules, module_utils and filter.
COLLECTION_DIR = PLAYBOOKS_DIR / "collections" / "ansible_collections" / "appliance" / "hgx"
FIRMWARE_DIR = BASE_DIR / "firmware"
DEMO_SITE = PACKAGE_DIR / "inventory" / "sites" / "demo.yml"
# Limits on a site definition (and a platform file), checked before anything is built from it: bytes,
# nesting depth, and nodes once every alias is expanded (a few KB of aliases can name billions of nodes).
SITE_MAX_BYTES = env_int("APPLIANCE_SITE_MAX_BYTES", 1024 * 1024)
SITE_MAX_DEPTH = env_int("APPLIANCE_SITE_MAX_DEPTH", 20)
SITE_MAX_NODES = env_int("APPLIANCE_SITE_MAX_NODES", 50_000)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        "file": {"class": "appliance.core.files.PrivateRotatingFileHandler", "formatter": "plain",
                 "filename": str(LOG_DIR / "appliance.log"), "maxBytes": 10 * 1024 * 1024, "backupCount": 5},
    },
    "root": {"handlers": ["console", "file"], "level": os.environ.get("APPLIANCE_LOG_LEVEL", "WARNING")},
    "loggers": {
        "appliance": {"level": os.environ.get("APPLIANCE_LOG_LEVEL", "INFO"), "propagate": True},
        "axes": {"level": "WARNING"},
    },
}
