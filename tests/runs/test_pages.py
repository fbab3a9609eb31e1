"""The web console: login required, the fleet overview, its htmx partial, run and node pages."""

import json

import pytest

from tests.runs.scenario import failure_and_restart


@pytest.fixture
def oncall(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("oncall"))
    return client


@pytest.fixture
def record(writer, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        writer.post("/api/v1/events", json.dumps(failure_and_restart()), content_type="application/json")


def test_it_sends_strangers_to_the_login_page(client, db):
    response = client.get("/")
    assert response.status_code == 302 and response.url.startswith("/login/")


def test_it_signs_in_with_the_login_form(client, django_user_model):
    django_user_model.objects.create_user("oncall", password="s3cret-pass")
    response = client.post("/login/", {"username": "oncall", "password": "s3cret-pass"})
    assert response.status_code == 302 and response.url == "/"


def test_the_overview_shows_clusters_nodes_by_state_and_runs(oncall, record):
    response = oncall.get("/")
    html = response.content.decode()
    assert response.status_code == 200
    assert 'id="cluster-' in html and "<h2>c1\n" in html
    assert "cordoned</span> 1" in html and "in service</span> 2" in html
    assert 'href="/runs/r1"' in html and "run-completed" in html
    assert "/static/vendor/htmx-2.0.11.min.js" in html
    assert 'id="recent-interruptions"' in html and "Faulty GPU" in html and "13 min 00 s" in html


def test_the_overview_answers_htmx_with_the_run_table_only(oncall, record):
    response = oncall.get("/?state=completed", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="run-table"') and "<html" not in html
    assert 'href="/runs/r1"' in html
    assert 'href="/runs/r1"' not in oncall.get("/?state=running", HTTP_HX_REQUEST="true").content.decode()
    assert response.headers["Vary"].count("HX-Request") == 1


def test_the_run_page_shows_interruptions_with_minutes_per_stage(oncall, record):
    html = oncall.get("/runs/r1").content.decode()
    assert "Faulty GPU" in html and "1 min 00 s" in html and "9 min 00 s" in html and "3 min 00 s" in html
    assert oncall.get("/runs/nope").status_code == 404


def test_the_node_page_shows_gpus_and_events(oncall, record):
    html = oncall.get("/nodes/n2").content.decode()
    assert "cordoned" in html and "GPU has fallen off the bus" in html
    assert "gpu.xid" in html and ">79 " in html
