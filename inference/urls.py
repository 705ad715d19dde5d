from django.urls import path, re_path

from . import (
    views_anthropic,
    views_metrics,
    views_openai,
    views_replicas,
    views_responses,
    views_status,
)

urlpatterns = [
    path("v1/chat/completions", views_openai.chat_completions),
    path("v1/completions", views_openai.completions),
    path("v1/embeddings", views_openai.embeddings),
    path("v1/rerank", views_openai.rerank),
    path("v1/models", views_openai.models),
    path("v1/models/<str:name>", views_openai.model_detail),
    path("v1/responses", views_responses.responses_create),
    path("v1/responses/<str:response_id>", views_responses.responses_detail),
    path("v1/responses/<str:response_id>/input_items", views_responses.responses_input_items),
    path("v1/messages", views_anthropic.messages),
    path("v1/messages/count_tokens", views_anthropic.count_tokens),
    re_path(r"^v1/(?P<rest>.*)$", views_openai.not_found),
    path("health", views_status.health),
    path("stats", views_status.stats),
    path("engine", views_status.engine),
    path("engine/replicas/<str:replica_id>/drain", views_replicas.drain_replica),
    path("metrics", views_metrics.metrics),
]
