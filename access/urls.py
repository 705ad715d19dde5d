from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from . import usage_api, views

urlpatterns = [
    path("me", views.MeApi.as_view()),
    path("keys", views.ApiKeyListCreateApi.as_view()),
    path("keys/<int:key_id>", views.ApiKeyRevokeApi.as_view()),
    path("settings/access", views.AccessSettingsApi.as_view()),
    path("usage", usage_api.UsageApi.as_view()),
    re_path(r"^schema/?$", SpectacularAPIView.as_view(), name="schema"),
    # Swagger UI from drf-spectacular-sidecar; not Redoc, whose page loads Google Fonts. The
    # split view serves its start-up script as a file (?script), as the CSP allows no inline one.
    re_path(r"^docs/?$", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    # JSON, not Django's HTML page, for any other /api path: a decoded path may hold a
    # newline (%0A), which "." would not match (and Django cannot reverse an inline flag).
    re_path(r"^[\s\S]*$", views.not_found),
]
