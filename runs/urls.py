from django.urls import path

from . import views

urlpatterns = [
    path("", views.overview, name="overview"),
    path("runs/<str:name>", views.run_detail, name="run-page"),
    path("nodes/<str:hostname>", views.node_detail, name="node-page"),
]
