"""FleetOps settings, read from the environment (see .env.example).

One module for every environment: development defaults are safe only because DEBUG defaults to on
locally and production must turn it off and then supply SECRET_KEY and ALLOWED_HOSTS itself.
"""

import os
from datetime import timedelta
from pathlib import Path

import environ
import plotly
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

from fleetops.policies import CONTENT_SECURITY_POLICY, SPECTACULAR_SETTINGS  # noqa: F401  (fixed for every environment)

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DEBUG", default=True)

if DEBUG:
    SECRET_KEY = env.str("SECRET_KEY", default="fleetops-insecure-development-key-do-not-use-in-production")
else:
    # No fallback: a production process without a secret must not start.
    SECRET_KEY = env.str("SECRET_KEY")

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "axes",
    "csp",
    "runs",
    "incidents",
]

MIDDLEWARE = [
    "fleetops.middleware.DatabaseUnavailableMiddleware",  # database down: 503 + Retry-After, never 500
    "fleetops.middleware.NulInUrlMiddleware",  # a NUL in the URL: 400, never a database lookup
    "fleetops.bodylimit.BodyLimitMiddleware",  # a body over DATA_UPLOAD_MAX_MEMORY_SIZE: 413 before anything reads it
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "fleetops.pagecache.ConsoleWritesMiddleware",  # a browser's own writes: its next pages read anew
    "fleetops.console.preferences.TimeZoneMiddleware",  # times in the signed-in person's zone (UTC by default)
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",  # last: turns a lockout into the lockout page
]

ROOT_URLCONF = "fleetops.urls"
WSGI_APPLICATION = "fleetops.wsgi.application"
ASGI_APPLICATION = "fleetops.asgi.application"

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
                "fleetops.pagecache.page_context",
            ],
        },
    },
]

(BASE_DIR / "var").mkdir(exist_ok=True)
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'var' / 'fleetops.sqlite3'}")}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the dev server read while the in-process tasks write; the timeout rides out short locks.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 20, "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"}
    )
else:
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # true behind PgBouncer in transaction mode (docs/DEPLOY.md): a server-side cursor cannot outlive a transaction.
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = env.bool("DB_DISABLE_SERVER_SIDE_CURSORS", default=False)

# A PostgreSQL streaming replica the console's pages read the record from while it is fresh enough
# (fleetops/replica.py, docs/DEPLOY.md): REPLICA_MAX_LAG_S at most behind the primary, asked every REPLICA_CHECK_S.
DATABASE_REPLICA_URL = env.str("DATABASE_REPLICA_URL", default="")
REPLICA_MAX_LAG_S = env.float("REPLICA_MAX_LAG_S", default=5.0)
REPLICA_CHECK_S = env.float("REPLICA_CHECK_S", default=1.0)
if DATABASE_REPLICA_URL:
    if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        raise ImproperlyConfigured("DATABASE_REPLICA_URL needs DATABASE_URL to name the PostgreSQL primary")
    if REPLICA_CHECK_S <= 0 or REPLICA_MAX_LAG_S < REPLICA_CHECK_S:
        raise ImproperlyConfigured("REPLICA_CHECK_S must be above 0 and at most REPLICA_MAX_LAG_S")
    DATABASES["replica"] = env.db_url_config(DATABASE_REPLICA_URL) | {
        "ATOMIC_REQUESTS": False,
        "CONN_MAX_AGE": DATABASES["default"]["CONN_MAX_AGE"],
        "CONN_HEALTH_CHECKS": True,
        "DISABLE_SERVER_SIDE_CURSORS": DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"],
        "TEST": {"MIRROR": "default"},  # the test runner creates no database there
    }
    DATABASES["replica"].setdefault("OPTIONS", {}).setdefault("connect_timeout", 2)  # a replica down: pages go on
    DATABASE_ROUTERS = ["fleetops.replica.ReplicaRouter"]
    MIDDLEWARE.insert(
        MIDDLEWARE.index("fleetops.pagecache.ConsoleWritesMiddleware") + 1, "fleetops.replica.ReplicaReadsMiddleware"
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# django-axes first: it counts failed sign-ins and refuses a locked-out username+IP before the password is checked.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
USE_I18N = False
USE_TZ = True  # stored in UTC; TIME_ZONE is only how pages show times
TIME_ZONE = env.str("TIME_ZONE", default="UTC")

STATIC_URL = "static/"
# plotly.js comes from the plotly package itself (/static/plotly/plotly.min.js): pinned by pyproject, no CDN.
STATICFILES_DIRS = [BASE_DIR / "static", ("plotly", Path(plotly.__file__).parent / "package_data")]
STATIC_ROOT = env.path("STATIC_ROOT", default=BASE_DIR / "var" / "staticfiles")
Path(STATIC_ROOT).mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# --- Event API ---
# Largest accepted body of POST /api/v1/events, in bytes; larger ones get 413 before parsing.
EVENTS_MAX_BODY_BYTES = env.int("EVENTS_MAX_BODY_BYTES", default=5 * 1024 * 1024)
EVENTS_MAX_BATCH = env.int("EVENTS_MAX_BATCH", default=10_000)
# Per-token quota (runs/quotas.py): events a token may send per window; over it, 429 with Retry-After. 100,000 per
# 10 s is 10,000 events/s a token: a 16,384-GPU run's agents and scheduler send far less than that each, and the
# intake takes ~35,000/s in all (docs/PERFORMANCE.md), so one sender cannot take most of it. 0: no limit.
EVENTS_QUOTA_PER_WINDOW = env.int("EVENTS_QUOTA_PER_WINDOW", default=100_000)
EVENTS_QUOTA_WINDOW_S = env.float("EVENTS_QUOTA_WINDOW_S", default=10.0)
if EVENTS_QUOTA_PER_WINDOW and EVENTS_QUOTA_PER_WINDOW < EVENTS_MAX_BATCH:
    raise ImproperlyConfigured("EVENTS_QUOTA_PER_WINDOW must be 0 (no limit) or at least EVENTS_MAX_BATCH")
# And the bytes of its requests' bodies per window (a token's quota_bytes overrides it; 0: no limit): 50 MiB per 10 s
# is ten of the largest bodies, 100,000 events of 500 bytes, and 13x a 1,024-rank job's clients at their busiest.
EVENTS_QUOTA_BYTES_PER_WINDOW = env.int("EVENTS_QUOTA_BYTES_PER_WINDOW", default=50 * 1024 * 1024)
# Clock skew: an event dated this far after its receipt is kept at its receipt time and flagged (Event.skew_s);
# one dated this far before it is kept as sent (a late delivery, or a slow clock) and flagged.
EVENTS_FUTURE_TOLERANCE_S = env.float("EVENTS_FUTURE_TOLERANCE_S", default=60.0)
EVENTS_LATE_FLAG_S = env.float("EVENTS_LATE_FLAG_S", default=24 * 3600.0)
# Retention (runs.retention): raw high-rate samples (rank step times and gradient norms, GPU health, heartbeats) older
# than this many days are summed into EventRollup per series and UTC day, then deleted (EVENTS_PRUNE_BATCH a commit).
EVENTS_RAW_RETENTION_DAYS = env.int("EVENTS_RAW_RETENTION_DAYS", default=14)
if EVENTS_RAW_RETENTION_DAYS < 1:
    raise ImproperlyConfigured("EVENTS_RAW_RETENTION_DAYS must be at least 1: the detectors read the last hours")
# The per-rank samples (rank.step_time, rank.grad_norm) alone, in hours: most of a big fleet's stream, read by the
# detectors for minutes (checked against their windows when the app loads: runs.apps). Heartbeats and GPU health
# keep the days above.
EVENTS_RANK_RETENTION_HOURS = env.int("EVENTS_RANK_RETENTION_HOURS", default=EVENTS_RAW_RETENTION_DAYS * 24)
EVENTS_PRUNE_BATCH = env.int("EVENTS_PRUNE_BATCH", default=10_000)
# Who hears "events applied": Celery tasks, by dotted path, looked up at run time and queued with the event ids once
# the record holds them (in-process where there is no broker). The record (runs) never imports its listeners.
EVENTS_APPLIED_HOOKS = ["incidents.detection.tasks.detect_events"]
# A sender's turn at applying (runs.services.turn_apply) gives way after this many seconds, or sooner when another
# sender waits: a flood then delays everyone else by about a chunk, and a worker's other queues get their turn too.
EVENTS_APPLY_TURN_S = env.float("EVENTS_APPLY_TURN_S", default=1.0)
# The node agents' polls share one turn (runs.services.turn_of), which starts this long after the first poll waiting
# in it: what an agent's event (an Xid among them) may wait more to be applied, for a turn a few hundred polls.
EVENTS_AGENTS_TURN_GATHER_S = env.float("EVENTS_AGENTS_TURN_GATHER_S", default=0.2)
DATA_UPLOAD_MAX_MEMORY_SIZE = EVENTS_MAX_BODY_BYTES
# The Alertmanager and PagerDuty intakes (incidents/intake/views.py): largest body, in bytes (PagerDuty's own limit
# is 512 KB an event), and most alerts in one Alertmanager webhook (set its webhook_config max_alerts to match).
INTAKE_MAX_BODY_BYTES = env.int("INTAKE_MAX_BODY_BYTES", default=1024 * 1024)
INTAKE_MAX_ALERTS = env.int("INTAKE_MAX_ALERTS", default=1_000)
# The largest request a token can make: a byte quota below it would refuse that request in every window.
QUOTA_BYTES_MIN = max(EVENTS_MAX_BODY_BYTES, INTAKE_MAX_BODY_BYTES)
if EVENTS_QUOTA_BYTES_PER_WINDOW and EVENTS_QUOTA_BYTES_PER_WINDOW < QUOTA_BYTES_MIN:
    raise ImproperlyConfigured(
        "EVENTS_QUOTA_BYTES_PER_WINDOW must be 0 (no limit) or at least EVENTS_MAX_BODY_BYTES and INTAKE_MAX_BODY_BYTES"
    )

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "runs.api.auth.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["runs.api.auth.ReadScope"],
    "DEFAULT_PAGINATION_CLASS": "runs.api.base.Pagination",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # Strict JSON only (fleetops/jsonparse.py): repeated keys, NaN, overflow, deep nesting, bad UTF-8 are 400s.
    "DEFAULT_PARSER_CLASSES": ["fleetops.jsonparse.StrictJSONParser"],
    "EXCEPTION_HANDLER": "runs.api.base.exception_handler",
    "UNAUTHENTICATED_USER": None,
}

# --- Cache ---
# Per process, in memory (pickled copies: safe across threads). It holds what pages compute from a run's record,
# keyed by a version of that record (runs.selectors.run_record_version), so processes never disagree, they only
# each compute once; 300 entries: a 54-day run's page is ~0.3 MB of them. Not the broker's Redis: clearing a cache
# there would flush the task queue with it.
# "pages": the console's pages kept PAGE_CACHE_S seconds, shared by the people who would be shown the same
# (fleetops/pagecache.py), apart so that pages never push the record's figures out; 200 pages (the overview of 16,384
# nodes is ~1.7 MB).
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "OPTIONS": {"MAX_ENTRIES": 300}},
    "pages": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "pages",
        "OPTIONS": {"MAX_ENTRIES": 200},
    },
}
PAGE_CACHE_S = env.int("PAGE_CACHE_S", default=5)  # the board's own poll: 0 turns the page cache off

# --- Celery ---
# Without Redis the broker is a folder (kombu's filesystem transport): the embedded default needs no server at all.
# Commands and tests run the tasks in-process, eagerly; `make run` (manage.py serve) starts a worker with beat on that
# folder beside the web server and turns eager off, so periodic detection, retries and their countdowns run there as
# in production, with the same task functions on the same schedule.
REDIS_URL = env.str("REDIS_URL", default="")
EMBEDDED_BROKER_DIR = env.path("EMBEDDED_BROKER_DIR", default=BASE_DIR / "var" / "broker")
CELERY_BROKER_URL = REDIS_URL or "filesystem://localhost/"
if not REDIS_URL:
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(EMBEDDED_BROKER_DIR),
        "data_folder_out": str(EMBEDDED_BROKER_DIR),
        "control_folder": str(Path(EMBEDDED_BROKER_DIR) / "control"),
        "store_processed": False,
    }
    for _folder in (EMBEDDED_BROKER_DIR, Path(EMBEDDED_BROKER_DIR) / "control"):
        Path(_folder).mkdir(parents=True, exist_ok=True)
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=not REDIS_URL)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TIMEZONE = "UTC"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_QUEUE", default="fleetops")
# One queue per kind of work, so a slow one (a report) never waits in line before an urgent one (a playbook).
# Run a worker per queue, or one worker on all of them (`make worker`); see docs/DEPLOY.md.
_Q = CELERY_TASK_DEFAULT_QUEUE
CELERY_TASK_ROUTES = {
    "runs.tasks.*": {"queue": f"{_Q}-ingest"},
    "incidents.tasks.detect_*": {"queue": f"{_Q}-detection"},
    "incidents.tasks.watch_*": {"queue": f"{_Q}-detection"},
    "incidents.tasks.advance_playbook": {"queue": f"{_Q}-playbooks"},
    "incidents.tasks.resume_playbooks": {"queue": f"{_Q}-playbooks"},
    # It waits on the schedulers' clients as a playbook step does: never ahead of detecting an applied event.
    "incidents.tasks.reconcile_schedulers": {"queue": f"{_Q}-playbooks"},
    "incidents.tasks.deliver_notification": {"queue": f"{_Q}-notifications"},
    "incidents.tasks.resume_deliveries": {"queue": f"{_Q}-notifications"},
    "incidents.report_tasks.*": {"queue": f"{_Q}-reports"},
    "runs.tasks.prune_events": {"queue": f"{_Q}-reports"},  # slow background upkeep: never ahead of an apply
}
# Every task module: workers import them at start, fleetops.celery.task_named on first use (runs.tasks is also found
# by autodiscovery); the incident concerns keep their own.
CELERY_IMPORTS = [
    "runs.tasks",
    "incidents.detection.tasks",
    "incidents.playbooks.tasks",
    "incidents.notifications.tasks",
    "incidents.reports.tasks",
    "incidents.demo.tasks",
]
FLEETOPS_QUEUES = [_Q, *sorted({route["queue"] for route in CELERY_TASK_ROUTES.values()})]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE = {
    # Safety net: applies events whose task was lost (broker restart, worker killed before ack).
    "apply-pending-events": {"task": "runs.tasks.apply_pending_events", "schedule": 60.0},
    "detect-pending": {"task": "incidents.tasks.detect_pending", "schedule": 60.0},
    "watch-hangs": {"task": "incidents.tasks.watch_hangs", "schedule": 60.0},
    "watch-heartbeats": {"task": "incidents.tasks.watch_heartbeats", "schedule": 60.0},
    "auto-resolve": {"task": "incidents.tasks.auto_resolve", "schedule": 60.0},
    "detect-stragglers": {"task": "incidents.tasks.detect_stragglers", "schedule": 300.0},
    "detect-sdc": {"task": "incidents.tasks.detect_sdc", "schedule": 300.0},
    "detect-lemons": {"task": "incidents.tasks.detect_lemons", "schedule": 3600.0},
    "prune-events": {"task": "runs.tasks.prune_events", "schedule": crontab(minute=17)},  # hourly, off the hour
    "resume-playbooks": {"task": "incidents.tasks.resume_playbooks", "schedule": 30.0},
    "resume-deliveries": {"task": "incidents.tasks.resume_deliveries", "schedule": 60.0},
    # Every Monday 00:00 UTC, the week before.
    "weekly-report": {
        "task": "incidents.report_tasks.generate_weekly_report",
        "schedule": crontab(minute=0, hour=0, day_of_week="mon"),
    },
}
# The scheduler reconciliation (incidents/detection/services/reconcile.py): this often (seconds; 0: never) the runs the
# record calls running or restarting on a Slurm or Kubernetes cluster are checked against the scheduler's own view, and
# a job it says ended is ended as it says. One that ended less than the grace ago is left to its own end event (the
# Slurm epilog retries for about 45 s).
SCHEDULER_RECONCILE_S = env.float("SCHEDULER_RECONCILE_S", default=60.0)
SCHEDULER_RECONCILE_GRACE_S = env.float("SCHEDULER_RECONCILE_GRACE_S", default=60.0)
if SCHEDULER_RECONCILE_S > 0:
    CELERY_BEAT_SCHEDULE["reconcile-schedulers"] = {
        "task": "incidents.tasks.reconcile_schedulers",
        "schedule": SCHEDULER_RECONCILE_S,
    }
# The demo fleet's agents and trainer while `make run` serves it (incidents/demo/feed.py); never elsewhere.
DEMO_FEED = env.bool("DEMO_FEED", default=False)
if DEMO_FEED:
    CELERY_BEAT_SCHEDULE["demo-feed"] = {"task": "incidents.tasks.demo_feed", "schedule": 60.0}
DEMO_LOGIN_FILE = env.path("DEMO_LOGIN_FILE", default=BASE_DIR / "var" / "demo-login")  # incidents/demo/login.py

# --- Security (docs/DEPLOY.md, "Production settings"; tests/security/) ---
# Production is DEBUG off. Behind a TLS-terminating proxy (the default) the proxy must set X-Forwarded-Proto and
# strip it from clients; BEHIND_TLS_PROXY=false when gunicorn itself faces the network.
if not DEBUG:
    if env.bool("BEHIND_TLS_PROXY", default=True):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
# Lax, not Strict: a link to an incident from a page or an e-mail must open signed in; cross-site POSTs still
# carry no cookie.
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = True  # pages send the token from the template (hx-headers on <body>), never from the cookie
# One on-call shift, counted from sign-in (not renewed by the board's polling).
SESSION_COOKIE_AGE = env.int("SESSION_COOKIE_AGE", default=12 * 3600)

# Sign-in throttling (django-axes): this many failures for one username from one IP locks that pair out for the
# cool-off, with a 429 page; a success resets the count. The IP is REMOTE_ADDR (never a client-sent header):
# behind a proxy that is the proxy's, so the lockout is per username.
AXES_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("LOGIN_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_HTTP_RESPONSE_CODE = 429
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# Quiet unless asked for: django-axes prints a banner on every command and a log line per login otherwise. A lockout
# is still logged (at WARNING) either way.
AXES_VERBOSE = env.bool("AXES_VERBOSE", default=False)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "axes": {"level": "INFO" if AXES_VERBOSE else "WARNING"},
    },
}

# --- Detection and incidents ---
# Alerts from one switch or rack within this many seconds group into one incident.
INCIDENT_GROUP_WINDOW_S = env.int("INCIDENT_GROUP_WINDOW_S", default=900)
# A mitigated incident whose alerts have all cleared is resolved by FleetOps after this many quiet seconds; 0: never.
INCIDENT_AUTO_RESOLVE_S = env.float("INCIDENT_AUTO_RESOLVE_S", default=3600.0)
# Hang watchdog: no step for longer than max(k x the usual step interval, the floor) is a hang.
HANG_K = env.float("HANG_K", default=10.0)
HANG_FLOOR_S = env.float("HANG_FLOOR_S", default=600.0)
# Identical Xids on one GPU closer together than this are one fault (a storm), counted, alerted once.
XID_DEDUPE_WINDOW_S = env.float("XID_DEDUPE_WINDOW_S", default=300.0)
HEARTBEAT_TIMEOUT_S = env.float("HEARTBEAT_TIMEOUT_S", default=300.0)
# A run restarting with no event for this long (seconds) raises a "silent" alert, and its downtime stops growing at
# its last event plus this: nobody has said what became of it (docs/DOMAIN.md section 2). A new event revives it.
RUN_SILENT_S = env.float("RUN_SILENT_S", default=21600.0)
RETIRED_PAGES_THRESHOLD = env.int("RETIRED_PAGES_THRESHOLD", default=60)
GPU_SLOWDOWN_C = env.float("GPU_SLOWDOWN_C", default=87.0)
STRAGGLER_THRESHOLD_MADS = env.float("STRAGGLER_THRESHOLD_MADS", default=3.5)
STRAGGLER_WINDOW_S = env.float("STRAGGLER_WINDOW_S", default=300.0)
STRAGGLER_CONSECUTIVE = env.int("STRAGGLER_CONSECUTIVE", default=3)
SDC_REL_TOLERANCE = env.float("SDC_REL_TOLERANCE", default=0.05)
SDC_REPEATS = env.int("SDC_REPEATS", default=3)
LEMON_WINDOW_S = env.float("LEMON_WINDOW_S", default=7 * 86400.0)
LEMON_THRESHOLD = env.int("LEMON_THRESHOLD", default=3)
# A repair's usual length in hours, until the cluster's own repairs say otherwise (the spare pool size).
REPAIR_HOURS_DEFAULT = env.float("REPAIR_HOURS_DEFAULT", default=48.0)
# The least record a cluster's failure rate sizes its spare pool from: below it the pool says "not enough record" (an
# hour of a new cluster with two failures is a rate of 2 an hour, which would ask for more spares than it has nodes).
SPARE_MIN_RECORD_HOURS = env.float("SPARE_MIN_RECORD_HOURS", default=24.0)
# A run's restart cost (fault to training again) before it has restarted once: what shrink-and-continue prices a
# restart at (the advisor's R; the run's own median replaces it).
RESTART_S_DEFAULT = env.float("RESTART_S_DEFAULT", default=600.0)
# How long the overview's spare-pool figures keep the measured repair times (seconds); spares now are always live.
SPARE_REPAIR_CACHE_S = env.int("SPARE_REPAIR_CACHE_S", default=300)
# Playbooks stop and page a human rather than take more than this share of a cluster out of service.
PLAYBOOK_AUTO_START = env.bool("PLAYBOOK_AUTO_START", default=True)
# ... but only for faults this recent (seconds): late or backfilled events never drain a node.
PLAYBOOK_AUTO_START_MAX_AGE_S = env.float("PLAYBOOK_AUTO_START_MAX_AGE_S", default=900.0)
PLAYBOOK_MAX_OUT_SHARE = env.float("PLAYBOOK_MAX_OUT_SHARE", default=0.05)
# Beside the share: at most this many nodes out of service in a cluster, and at most this many drains by FleetOps in
# a cluster per hour (failures come every few hours at 16,384 GPUs; a burst past this is for a person to judge).
PLAYBOOK_MAX_OUT_NODES = env.int("PLAYBOOK_MAX_OUT_NODES", default=64)
PLAYBOOK_MAX_DRAINS_PER_HOUR = env.int("PLAYBOOK_MAX_DRAINS_PER_HOUR", default=8)
# A running step belongs to its worker while the execution's heartbeat is younger than this (seconds); after that
# the worker is taken for dead and another may run the step again (resume_playbooks looks for the same age).
PLAYBOOK_STEP_LEASE_S = env.float("PLAYBOOK_STEP_LEASE_S", default=60.0)
# Seconds a Slurm client call (sinfo, scontrol, ...) may take; a slower one is a transient error, retried.
SLURM_TIMEOUT_S = env.float("SLURM_TIMEOUT_S", default=30.0)
# Seconds each change to the simulated cluster takes (tests widen race and kill windows with it; 0 in use).
SIMULATED_CLUSTER_DELAY_S = env.float("SIMULATED_CLUSTER_DELAY_S", default=0.0)
# What a GPU-hour costs, for the incident's cost per minute.
GPU_HOUR_COST_USD = env.float("GPU_HOUR_COST_USD", default=2.5)
# Levers (runs/domain/levers.py): the detection a step heartbeat gives (a fault noticed within a minute), and the
# blocking of an asynchronous sharded copy to host memory (docs/DOMAIN.md section 2's 20 s); the other targets come
# from the run's own record. Each can be overridden per request.
LEVER_DETECTION_TARGET_S = env.float("LEVER_DETECTION_TARGET_S", default=60.0)
LEVER_ASYNC_BLOCKING_S = env.float("LEVER_ASYNC_BLOCKING_S", default=20.0)
# Checkpoint I/O (runs/domain/checkpoint_io.py): each hop's bandwidth in GB/s (10^9 bytes a second) for a cluster
# that does not say its own (admin: Clusters), each default's source in docs/DOMAIN.md section 3, "Checkpoint I/O":
# a GPU's PCIe Gen5 x16 link to pinned host memory; a node's local NVMe (one drive); the shared file system's
# aggregate (Llama 3's Tectonic, sustained); a node's network to a peer (8 x 400 Gb/s). The target: the share of a
# run's time its checkpoint writes may cost.
CHECKPOINT_GPU_HOST_GB_S = env.float("CHECKPOINT_GPU_HOST_GB_S", default=50.0)
CHECKPOINT_NVME_GB_S = env.float("CHECKPOINT_NVME_GB_S", default=6.5)
CHECKPOINT_STORAGE_GB_S = env.float("CHECKPOINT_STORAGE_GB_S", default=2000.0)
CHECKPOINT_PEER_GB_S = env.float("CHECKPOINT_PEER_GB_S", default=400.0)
CHECKPOINT_TARGET_OVERHEAD = env.float("CHECKPOINT_TARGET_OVERHEAD", default=0.01)

# /metrics (fleetops/console/metrics.py): the whole answer is kept this long, a scrape inside it costs nothing; the
# 24 h goodput of every run, the one costly figure, is kept longer. Events are counted up to those received
# METRICS_EVENTS_SETTLE_S ago: an intake transaction still open after that would be missed by the counters.
METRICS_CACHE_S = env.float("METRICS_CACHE_S", default=10.0)
METRICS_GOODPUT_CACHE_S = env.float("METRICS_GOODPUT_CACHE_S", default=60.0)
METRICS_EVENTS_SETTLE_S = env.float("METRICS_EVENTS_SETTLE_S", default=30.0)
# Per-run series for this many runs with time in the window, live ones first, then by GPU-seconds; the rest are one
# series, run="(other)", counted in fleetops_runs_folded (unbounded: 90,593 lines at 10,000 runs).
METRICS_MAX_RUNS = env.int("METRICS_MAX_RUNS", default=50)
if METRICS_MAX_RUNS < 0:
    raise ImproperlyConfigured("METRICS_MAX_RUNS must be 0 (every run folded) or more")
# Severity by cost as well (docs/DOMAIN.md section 6): SEV1 and SEV2 from this many dollars a minute burning. Unset,
# GPUs idled grade alone (at one price a dollar threshold is a GPU threshold); set them where GPU prices differ.
INCIDENT_SEV1_USD_PER_MIN = env.float("INCIDENT_SEV1_USD_PER_MIN", default=None)
INCIDENT_SEV2_USD_PER_MIN = env.float("INCIDENT_SEV2_USD_PER_MIN", default=None)

# --- Outgoing notifications (incidents.notifications.services) ---
# Links in webhooks and e-mails: where people open FleetOps, e.g. https://fleetops.example.com. Unset: where `make run`
PUBLIC_URL = env.str("PUBLIC_URL", default=os.environ.get("MAKE_RUN_URL", "http://localhost:8000"))  # serves it
NOTIFY_MAX_ATTEMPTS = env.int("NOTIFY_MAX_ATTEMPTS", default=6)  # attempts per delivery, the first included
NOTIFY_BACKOFF_S = env.float("NOTIFY_BACKOFF_S", default=30.0)  # before the 2nd attempt; doubles after each
NOTIFY_TIMEOUT_S = env.float("NOTIFY_TIMEOUT_S", default=10.0)  # per HTTP request
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="fleetops@localhost")
EMAIL_HOST = env.str("EMAIL_HOST", default="localhost")
EMAIL_PORT = env.int("EMAIL_PORT", default=25)
# In development (DEBUG) with no EMAIL_HOST set, the embedded default, each message is a file under var/mail/: a
# sink anyone can read, where the demo's on-call e-mail endpoint delivers. Production (DEBUG off) always sends through
# SMTP, EMAIL_HOST or localhost: a page written to a file would be "delivered" and read by nobody.
EMAIL_BACKEND = env.str(
    "EMAIL_BACKEND",
    default="django.core.mail.backends."
    + ("filebased.EmailBackend" if DEBUG and "EMAIL_HOST" not in os.environ else "smtp.EmailBackend"),
)
EMAIL_FILE_PATH = env.path("EMAIL_FILE_PATH", default=BASE_DIR / "var" / "mail")
