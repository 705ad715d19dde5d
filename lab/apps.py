from django.apps import AppConfig


class LabConfig(AppConfig):
    """The browser lab: pages, saved conversations and presets, the chat websocket."""

    name = "lab"
    default_auto_field = "django.db.models.BigAutoField"
