from django.db import models

from .sampling_defaults import ThinkingDeclaration


class LanguageModel(models.Model):
    """A model folder the lab can serve (MLX / Hugging Face layout)."""

    name = models.SlugField(max_length=200, unique=True)
    path = models.CharField(max_length=1000)
    architecture = models.CharField(max_length=100, blank=True)
    quantization = models.CharField(max_length=200, blank=True)
    size_bytes = models.BigIntegerField(default=0)
    context_length = models.PositiveIntegerField(default=0)
    # The model that drafts for this one when a request names no draft_model (speculative
    # decoding); it must share this one's vocabulary (checked by the worker).
    draft_model = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="drafts_for"
    )
    # Where a model pulled from the Hugging Face Hub came from: the repo, the revision
    # asked for (a branch follows updates) and the commit its files are.
    repo_id = models.CharField(max_length=200, blank=True)
    revision = models.CharField(max_length=200, blank=True)
    commit_sha = models.CharField(max_length=64, blank=True)
    # What the model declares about thinking (its generation_config.json, read when it is
    # registered: sampling_defaults.declared_thinking); null where it declares nothing, and
    # the server's settings apply (MLXLAB_THINKING over this, this over
    # MLXLAB_NO_THINK_TEMPERATURE).
    thinking_default = models.BooleanField(null=True, blank=True)
    no_think_temperature = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def thinking_declaration(self) -> ThinkingDeclaration:
        """The registry's record of what the model declares about thinking."""
        return ThinkingDeclaration(self.thinking_default, self.no_think_temperature)


class StoredResponse(models.Model):
    """A /v1/responses result kept so `previous_response_id` can continue it."""

    id = models.CharField(max_length=64, primary_key=True)
    # Who created it (api/access.py caller_id); only they can read, continue or delete it.
    owner = models.CharField(max_length=64, blank=True, db_index=True)
    model = models.CharField(max_length=200)
    previous = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="next_responses"
    )
    # The id it continued, kept when that row is gone: a chain with a hole is refused,
    # never served without its early turns.
    previous_ref = models.CharField(max_length=64, blank=True)
    instructions = models.TextField(blank=True)
    input_items = models.JSONField(default=list)  # this turn's input, as items with ids
    output_items = models.JSONField(default=list)
    body = models.JSONField(default=dict)  # the whole response object, as served
    output_text = models.TextField(blank=True)  # for search in the admin
    status = models.CharField(max_length=20, default="completed")
    usage = models.JSONField(default=dict)
    size_bytes = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.id


class Adapter(models.Model):
    """A LoRA or DoRA adapter made by a finetune job, applied at inference on request."""

    name = models.SlugField(max_length=200, unique=True)
    base_model = models.CharField(max_length=200)  # the LanguageModel it was trained on
    path = models.CharField(max_length=1000)  # holds adapter_config.json, adapters.safetensors
    fine_tune_type = models.CharField(max_length=16, default="lora")
    job_id = models.CharField(max_length=64, blank=True)
    summary = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
