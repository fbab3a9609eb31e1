from django.urls import path

from incidents.pages import reports

urlpatterns = [
    path("", reports.report_list, name="report-list"),
    path("generate", reports.report_create, name="report-create"),
    path("<int:pk>", reports.report_page, name="report-page"),
    path("<int:pk>.html", reports.report_download, name="report-download"),
    path("<int:pk>.csv", reports.report_csv, name="report-csv"),
    path("<int:pk>.pdf", reports.report_pdf, name="report-pdf"),
]
