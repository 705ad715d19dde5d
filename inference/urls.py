from django.urls import path, re_path

from . import views_openai, views_status

urlpatterns = [
    path("v1/chat/completions", views_openai.chat_completions),
    path("v1/completions", views_openai.completions),
    path("v1/models", views_openai.models),
    path("v1/models/<str:name>", views_openai.model_detail),
    re_path(r"^v1/(?P<rest>.*)$", views_openai.not_found),
    path("health", views_status.health),
    path("stats", views_status.stats),
]
