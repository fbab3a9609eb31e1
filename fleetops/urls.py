from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("", include("fleetops.console.urls")),
    path("", include("runs.urls")),
    path("incidents/", include("incidents.urls")),
    path("api/v1/", include("runs.api.urls")),
    path("api/v1/", include("incidents.api.urls")),
    path("reports/", include("incidents.reports.urls")),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
]
