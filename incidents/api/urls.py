from django.urls import path
from rest_framework.routers import SimpleRouter

from . import views

router = SimpleRouter(trailing_slash=False)
router.register("incidents", views.IncidentViewSet, basename="incident")

urlpatterns = [path("metrics/response", views.response_metrics, name="response-metrics"), *router.urls]
