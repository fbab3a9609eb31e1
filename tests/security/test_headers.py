"""Security headers, cookies and sessions: in development (this process) and in production (a subprocess with the
production environment of docs/DEPLOY.md, since settings are read once, at start)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": "k" * 20 + "-production-secret-of-sufficient-length-and-variety-9f3a",
    "ALLOWED_HOSTS": "fleetops.example.com",
}
CSP = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self' 'unsafe-inline'",
    "img-src": "'self' data:",
    "font-src": "'self' data:",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'none'",
    "frame-ancestors": "'none'",
    "form-action": "'self'",
}


def parse_csp(header: str) -> dict[str, str]:
    return {d.split(" ", 1)[0]: d.split(" ", 1)[1] for d in (p.strip() for p in header.split(";")) if d}


def production(*args: str, env: dict) -> subprocess.CompletedProcess:
    unset = ("DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "DJANGO_ALLOW_ASYNC_UNSAFE", "BEHIND_TLS_PROXY")
    clean = {k: v for k, v in os.environ.items() if k not in unset}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=60
    )


# Asks the production app for the sign-in page through Django's test client, over http and https, direct or through
# the proxy's X-Forwarded-Proto; prints status, headers and the CSRF cookie's attributes. Static files are not
# collected here, so the manifest storage is swapped for the plain one.
PROBE = """
import json, django
django.setup()
from django.conf import settings
from django.test import Client, override_settings
plain = {**settings.STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
out = {"settings": {k: getattr(settings, k, None) for k in (
    "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SESSION_COOKIE_HTTPONLY", "SESSION_COOKIE_SAMESITE",
    "SESSION_COOKIE_AGE", "SECURE_SSL_REDIRECT", "SECURE_PROXY_SSL_HEADER")}}
with override_settings(STORAGES=plain):
    for name, kwargs in (("http", {}), ("https", {"secure": True}), ("proxied", {"HTTP_X_FORWARDED_PROTO": "https"})):
        r = Client(HTTP_HOST="fleetops.example.com").get("/login/", **kwargs)
        c = r.cookies.get("csrftoken")
        out[name] = {"status": r.status_code, "headers": dict(r.headers),
                     "csrf_cookie": {k: c[k] for k in ("secure", "httponly", "samesite")} if c else None}
print(json.dumps(out))
"""


def test_every_page_carries_the_security_headers(client):
    response = client.get("/login/")
    assert response.status_code == 200
    assert parse_csp(response["Content-Security-Policy"]) == CSP
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"
    assert "Strict-Transport-Security" not in response  # development: HSTS only in production


def test_the_session_cookie_is_httponly_lax_and_lasts_a_shift(db, client):
    get_user_model().objects.create_user("ana", password="s3cret-pass-for-tests")
    response = client.post("/login/", {"username": "ana", "password": "s3cret-pass-for-tests"})
    assert response.status_code == 302
    cookie = response.cookies[settings.SESSION_COOKIE_NAME]
    assert cookie["httponly"] is True and cookie["samesite"] == "Lax" and cookie["max-age"] == 12 * 3600
    assert not cookie["secure"]  # development serves plain http; production: the test below
    csrf = response.cookies[settings.CSRF_COOKIE_NAME]
    assert csrf["httponly"] is True and csrf["samesite"] == "Lax"


@pytest.mark.reliability(
    "Production deployment misconfigured (plain http, framing, sniffing, cookies over http)",
    how="DEBUG=false process asked for the sign-in page over http, https, and through the proxy's "
    "X-Forwarded-Proto, then with BEHIND_TLS_PROXY=false",
    outcome="http is redirected (301) to https; https answers with HSTS (1 year, subdomains, preload), the CSP, "
    "X-Frame-Options DENY, nosniff, Referrer-Policy, COOP; cookies Secure, HttpOnly, SameSite=Lax; a forged "
    "X-Forwarded-Proto is not trusted when no proxy is declared",
)
def test_production_redirects_to_https_and_sends_hsts_and_secure_cookies():
    result = production("-c", PROBE, env={**PRODUCTION, "DJANGO_SETTINGS_MODULE": "fleetops.settings"})
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["settings"] == {
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SESSION_COOKIE_HTTPONLY": True,
        "SESSION_COOKIE_SAMESITE": "Lax",
        "SESSION_COOKIE_AGE": 43200,
        "SECURE_SSL_REDIRECT": True,
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],
    }
    assert out["http"]["status"] == 301
    assert out["http"]["headers"]["Location"] == "https://fleetops.example.com/login/"
    for name in ("https", "proxied"):
        answer = out[name]
        assert answer["status"] == 200, answer
        headers = answer["headers"]
        assert headers["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"
        assert parse_csp(headers["Content-Security-Policy"]) == CSP
        assert headers["X-Frame-Options"] == "DENY" and headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Referrer-Policy"] == "same-origin" and headers["Cross-Origin-Opener-Policy"] == "same-origin"
        assert answer["csrf_cookie"] == {"secure": True, "httponly": True, "samesite": "Lax"}

    direct = production(
        "-c", PROBE, env={**PRODUCTION, "BEHIND_TLS_PROXY": "false", "DJANGO_SETTINGS_MODULE": "fleetops.settings"}
    )
    assert direct.returncode == 0, direct.stderr
    out = json.loads(direct.stdout.strip().splitlines()[-1])
    assert out["settings"]["SECURE_PROXY_SSL_HEADER"] is None
    assert out["proxied"]["status"] == 301  # the forged header does not pass for https
    assert out["https"]["status"] == 200


@pytest.mark.reliability(
    "Production settings that Django's deployment checklist flags",
    how="manage.py check --deploy --fail-level WARNING in a DEBUG=false process with the production environment",
    outcome="exit 0 and no warning, with django-axes and django-csp installed",
)
def test_check_deploy_is_clean_in_production():
    result = production("manage.py", "check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout
    assert "WARNING" not in result.stdout + result.stderr and "?:" not in result.stdout
