from django.urls import path

from fleetops.console import metrics, node_page, overview, preferences, run_page
from fleetops.console.search import views as search

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("runs/<str:name>", run_page.run_detail, name="run-page"),
    path("runs/<str:name>/advisor", run_page.run_advisor, name="run-advisor"),
    path("runs/<str:name>/levers", run_page.run_levers, name="run-levers"),
    path("nodes/<str:hostname>", node_page.node_detail, name="node-page"),
    path("search", search.search, name="search"),
    path("preferences", preferences.preferences, name="preferences"),
    path("preferences/save", preferences.preferences_save, name="preferences-save"),
    path("metrics", metrics.metrics, name="metrics"),
]
