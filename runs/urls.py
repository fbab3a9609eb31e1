from django.urls import path

from runs import views

urlpatterns = [
    path("", views.overview, name="overview"),
    path("fleet", views.fleet, name="fleet"),
    path("runs/<str:name>", views.run_detail, name="run-page"),
    path("runs/<str:name>/advisor", views.run_advisor, name="run-advisor"),
    path("nodes/<str:hostname>", views.node_detail, name="node-page"),
]
