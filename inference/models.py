from django.db import models


class LanguageModel(models.Model):
    """A model folder the lab can serve (MLX / Hugging Face layout)."""

    name = models.SlugField(max_length=200, unique=True)
    path = models.CharField(max_length=1000)
    architecture = models.CharField(max_length=100, blank=True)
    quantization = models.CharField(max_length=200, blank=True)
    size_bytes = models.BigIntegerField(default=0)
    context_length = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
