from django.urls import path
from rest_framework.routers import SimpleRouter

from incidents.api import views
from incidents.intake import views as intake

router = SimpleRouter(trailing_slash=False)
router.register("incidents", views.IncidentViewSet, basename="incident")

urlpatterns = [
    path("metrics/response", views.response_metrics, name="response-metrics"),
    path("intake/alertmanager", intake.alertmanager_webhook, name="intake-alertmanager"),
    path("intake/pagerduty/v2/enqueue", intake.pagerduty_enqueue, name="intake-pagerduty"),
    *router.urls,
]
