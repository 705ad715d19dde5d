from django.conf import settings
from django.db import models


class Conversation(models.Model):
    """A chat in the lab, with the settings it was last run with."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.CharField(max_length=200, default="New chat")
    model = models.CharField(max_length=200, blank=True)
    system_prompt = models.TextField(blank=True)
    params = models.JSONField(default=dict, blank=True)  # sampling, thinking, structured
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return self.title


class Message(models.Model):
    """One turn; a conversation's messages are read in id order."""

    ROLES = [("user", "user"), ("assistant", "assistant")]

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    role = models.CharField(max_length=16, choices=ROLES)
    content = models.TextField(blank=True)
    reasoning = models.TextField(blank=True)
    stats = models.JSONField(default=dict, blank=True)  # ttft, tokens/s, counts, finish reason
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:40]}"


class Preset(models.Model):
    """A saved system prompt with sampling parameters, per user."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="presets"
    )
    name = models.CharField(max_length=100)
    system_prompt = models.TextField(blank=True)
    params = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["owner", "name"], name="unique_preset_name")]

    def __str__(self) -> str:
        return self.name


class SideBySide(models.Model):
    """One prompt answered by 2-4 variants at once, each reply in a conversation of its
    own (in column order), and which reply the user found better."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="side_by_sides"
    )
    prompt = models.TextField()
    variants = models.JSONField(default=list)  # labels: "model" or "model + adapter"
    conversations = models.ManyToManyField(Conversation, related_name="side_by_sides")
    conversation_ids = models.JSONField(default=list)  # the columns' order
    winner = models.PositiveSmallIntegerField()  # index into variants
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.variants[self.winner]} preferred ({' vs '.join(self.variants)})"
