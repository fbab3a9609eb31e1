from django.urls import path

from runs import views

urlpatterns = [
    path("fleet", views.fleet, name="fleet"),
]
