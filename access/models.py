from django.db import models


class ApiKey(models.Model):
    """A user's key for /v1 and /api; only its SHA-256 digest and a short prefix are kept."""

    user = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="api_keys")
    label = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, editable=False)  # shown to tell keys apart
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        # The table inference created before keys had an app of their own; the move
        # changed only Django's state (migrations on both sides), never the data.
        db_table = "inference_apikey"
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.label or self.user})"

    @property
    def active(self) -> bool:
        return self.revoked_at is None
