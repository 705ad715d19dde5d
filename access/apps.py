from django.apps import AppConfig


class AccessConfig(AppConfig):
    """API keys and the /api plumbing every app's endpoints share."""

    name = "access"
    verbose_name = "Access"
    default_auto_field = "django.db.models.BigAutoField"
