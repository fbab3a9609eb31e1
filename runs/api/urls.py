from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import SimpleRouter

from runs.api import goodput, views

router = SimpleRouter(trailing_slash=False)
router.register("runs", views.RunViewSet, basename="run")
router.register("nodes", views.NodeViewSet, basename="node")

urlpatterns = [
    path("events", views.events_create, name="events"),
    path("runs/<str:name>/goodput", goodput.run_goodput, name="run-goodput"),
    path("runs/<str:name>/advice", goodput.run_advice, name="run-advice"),
    path("runs/<str:name>/levers", goodput.run_levers, name="run-levers-api"),
    path("runs/<str:name>/checkpoint-io", goodput.run_checkpoint_io, name="run-checkpoint-io"),
    path("fleet/goodput", goodput.fleet_goodput, name="fleet-goodput"),
    path("advisor", goodput.advisor_what_if, name="advisor"),
    path("schema", SpectacularAPIView.as_view(permission_classes=[]), name="schema"),
    # Split: the Swagger UI set-up script is served as a file, not inline (the Content-Security-Policy).
    path("docs", SpectacularSwaggerSplitView.as_view(url_name="schema", permission_classes=[]), name="api-docs"),
    *router.urls,
]
