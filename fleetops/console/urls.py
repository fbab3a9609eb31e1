from django.urls import path

from fleetops.console import metrics, node, overview, preferences, run
from fleetops.console.search import page as search

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("runs/<str:name>", run.run_detail, name="run-page"),
    path("runs/<str:name>/advisor", run.run_advisor, name="run-advisor"),
    path("runs/<str:name>/levers", run.run_levers, name="run-levers"),
    path("nodes/<str:hostname>", node.node_detail, name="node-page"),
    path("search", search.search, name="search"),
    path("preferences", preferences.preferences, name="preferences"),
    path("preferences/save", preferences.preferences_save, name="preferences-save"),
    path("metrics", metrics.metrics, name="metrics"),
]
