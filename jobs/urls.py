from django.urls import path

from . import views

urlpatterns = [
    path("jobs/", views.job_list, name="jobs"),
    path("jobs/<uuid:job_id>/", views.job_page, name="job"),
    path("jobs/<uuid:job_id>/compare/", views.job_comparison, name="job-comparison"),
]
