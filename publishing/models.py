from django.conf import settings
from django.db import models


class HubToken(models.Model):
    """The lab's Hugging Face token, encrypted at rest; one per installation."""

    ciphertext = models.BinaryField(editable=False)
    username = models.CharField(max_length=200, blank=True)  # from whoami, when it answered
    set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, editable=False
    )
    set_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "Hugging Face token"

    def __str__(self) -> str:
        return f"Hugging Face token (set {self.set_at:%Y-%m-%d %H:%M})"
