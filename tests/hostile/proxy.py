"""gunicorn serving fleetops.wsgi on the test's PostgreSQL, and nginx in front of it with the files contrib/nginx
ships (limits.conf in `http`, proxy.conf in the `server`) as docs/DEPLOY.md tells operators to put them."""

import contextlib
import shutil
import subprocess
import sys
from pathlib import Path

import requests

from tests.conftest import require
from tests.services import free_ports, session_database_url, wait_for

ROOT = Path(__file__).resolve().parents[2]
PROXY_CONF = ROOT / "contrib" / "nginx" / "proxy.conf"
LIMITS_CONF = ROOT / "contrib" / "nginx" / "limits.conf"


def gunicorn(port: int, root: Path) -> subprocess.Popen:
    env = {
        "DATABASE_URL": session_database_url(),
        "CELERY_TASK_ALWAYS_EAGER": "true",  # the test's own events apply in the request: no broker needed
        "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
    }
    command = [str(Path(sys.executable).parent / "gunicorn"), "fleetops.wsgi:application"]
    command += ["-b", f"127.0.0.1:{port}", "-w", "2", "--timeout", "30"]
    log = (root / "gunicorn.log").open("ab")
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def nginx(port: int, upstream: int, root: Path) -> subprocess.Popen:
    """nginx on 127.0.0.1:`port`; its error log (refusals by the limits among it) in `root`/nginx-error.log."""
    conf = root / "nginx.conf"
    conf.write_text(
        f"""
daemon off;
worker_processes 1;
worker_rlimit_nofile 8192;
pid {root}/nginx.pid;
error_log {root}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    include {LIMITS_CONF};
    upstream fleetops {{ server 127.0.0.1:{upstream}; keepalive 8; }}
    server {{
        listen 127.0.0.1:{port};
        include {PROXY_CONF};
        location / {{ proxy_pass http://fleetops; }}
    }}
}}
"""
    )
    check = subprocess.run(["nginx", "-t", "-c", str(conf), "-p", str(root)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    return subprocess.Popen(["nginx", "-c", str(conf), "-p", str(root)], stderr=subprocess.DEVNULL)


def answers(url: str) -> bool:
    try:
        return requests.get(url + "/login/", timeout=2).status_code == 200
    except requests.RequestException:
        return False


@contextlib.contextmanager
def behind_nginx(root: Path):
    """gunicorn, and nginx in front of it, both answering: yields (gunicorn's port, nginx's port)."""
    require(shutil.which("nginx") is not None, "nginx (apt-get install nginx)")
    g_port = free_ports(2)
    server = gunicorn(g_port, root)
    proxy = None
    try:
        wait_for(lambda: answers(f"http://127.0.0.1:{g_port}"), timeout=60, what="gunicorn to answer")
        proxy = nginx(g_port + 1, g_port, root)
        wait_for(lambda: answers(f"http://127.0.0.1:{g_port + 1}"), timeout=30, what="nginx to answer")
        yield g_port, g_port + 1
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait(10)
        server.terminate()
        server.wait(15)
