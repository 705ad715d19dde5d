from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("lab.api_urls")),
    path("api/", include("jobs.api_urls")),
    path("api/", include("publishing.urls")),
    path("api/", include("access.urls")),  # ends with the JSON 404 for /api/*
    path("", include("inference.urls")),
    path("", include("lab.urls")),
    path("", include("jobs.urls")),
]
