from django.urls import path

from incidents.reports import views as report_views

urlpatterns = [
    path("", report_views.report_list, name="report-list"),
    path("generate", report_views.report_create, name="report-create"),
    path("<int:pk>", report_views.report_page, name="report-page"),
    path("<int:pk>.html", report_views.report_download, name="report-download"),
    path("<int:pk>.csv", report_views.report_csv, name="report-csv"),
    path("<int:pk>.pdf", report_views.report_pdf, name="report-pdf"),
]
