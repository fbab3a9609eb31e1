"""Production settings: `check --deploy` is clean, and a missing SECRET_KEY stops the process."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": "k" * 20 + "-production-secret-of-sufficient-length-and-variety-9f3a",
    "ALLOWED_HOSTS": "fleetops.example.com",
}


def python(*args, env):
    """A Python process in the repository with `env` over this one's, less the settings the tests set for themselves
    (DJANGO_ALLOW_ASYNC_UNSAFE: the browser tests', for their own process only, not production)."""
    unset = ("DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "DJANGO_ALLOW_ASYNC_UNSAFE")
    clean = {k: v for k, v in os.environ.items() if k not in unset}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=60
    )


def manage(*args, env):
    return python("manage.py", *args, env=env)


def test_check_deploy_reports_nothing_above_info():
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_production_refuses_to_start_without_a_secret_key():
    env = {k: v for k, v in PRODUCTION.items() if k != "SECRET_KEY"}
    result = manage("check", env=env)
    assert result.returncode != 0 and "SECRET_KEY" in result.stderr


def test_a_read_replica_needs_a_postgresql_primary_and_a_sane_lag_bound():
    replica = {"DATABASE_REPLICA_URL": "postgres://postgres@127.0.0.1:5433/fleetops"}
    result = manage("check", env={**replica, "DATABASE_URL": "sqlite:///var/replica-check.sqlite3"})
    assert result.returncode != 0 and "DATABASE_REPLICA_URL needs DATABASE_URL" in result.stderr
    primary = {**replica, "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/fleetops"}
    result = manage("check", env={**primary, "REPLICA_MAX_LAG_S": "0.5"})
    assert result.returncode != 0 and "REPLICA_CHECK_S must be above 0 and at most REPLICA_MAX_LAG_S" in result.stderr
    result = manage("check", env=primary)  # nothing is asked of either server until a page is read
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_served_application_loads_every_view_and_freezes_what_it_loaded():
    """fleetops.wsgi hides the objects loaded at start from the garbage collector (gc.freeze): walking them made
    every tenth page 35 ms slower. The views must be loaded before, or they would be walked again."""
    script = (
        "import gc, sys; import fleetops.wsgi; "
        "print(gc.get_freeze_count(), 'incidents.pages.board' in sys.modules, 'runs.api.views' in sys.modules)"
    )
    result = python("-c", script, env={})
    assert result.returncode == 0, result.stderr
    frozen, board, api = result.stdout.split()
    assert int(frozen) > 50_000 and board == api == "True", result.stdout
