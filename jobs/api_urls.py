from django.urls import path

from . import api

urlpatterns = [
    path("jobs", api.JobListApi.as_view()),
    path("jobs/<uuid:job_id>", api.JobApi.as_view()),
    path("jobs/<uuid:job_id>/cancel", api.JobCancelApi.as_view()),
    path("jobs/<uuid:job_id>/evaluate-against-base", api.JobEvaluateAgainstBaseApi.as_view()),
    path("jobs/<uuid:job_id>/preview", api.DatasetPreviewApi.as_view()),
    path("datasets/uploads", api.UploadApi.as_view()),
    path("adapters", api.AdapterListApi.as_view()),
]
