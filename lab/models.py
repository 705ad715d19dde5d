from __future__ import annotations

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
    # The side-by-side run this conversation answered in (a key the page made up for the
    # run, shared by its 2-4 columns); blank for a chat. The sidebar groups by it.
    side_by_side_run = models.CharField(max_length=64, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return self.title


class MessageManager(models.Manager):
    def create(self, **fields) -> Message:
        """A message, by default the next turn of the shown branch (as `messages.create`
        appended to the conversation before turns had versions); `parent=None` makes a
        first turn. It becomes the shown version of its turn."""
        from .message_tree import add_message  # the tree's rules live there

        if "conversation" not in fields:
            fields["conversation"] = Conversation.objects.get(id=fields.pop("conversation_id"))
        if "parent_id" in fields:
            parent_id = fields.pop("parent_id")
            fields["parent"] = None if parent_id is None else self.get(id=parent_id)
        return add_message(**fields)


class Message(models.Model):
    """One turn of a conversation, which is a tree of them (docs/LAB_UI.md, "Reply
    versions"): a message's siblings (same parent) are the versions of its turn, and
    `shown` marks the one the page shows; lab/message_tree.py reads and changes it."""

    ROLES = [("user", "user"), ("assistant", "assistant")]

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    # The turn this one follows (null: a first turn). Deleting a message deletes the
    # branch that followed it; message_tree.delete_message keeps an only version's.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    shown = models.BooleanField(default=True)  # the shown version among its siblings
    role = models.CharField(max_length=16, choices=ROLES)
    content = models.TextField(blank=True)
    reasoning = models.TextField(blank=True)
    stats = models.JSONField(default=dict, blank=True)  # ttft, tokens/s, counts, finish reason
    created_at = models.DateTimeField(auto_now_add=True)

    objects = MessageManager()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:40]}"


class MessageAttachment(models.Model):
    """An image or audio clip a user message carried, in the order sent: its bytes as the
    API's parser checked them (inference/media/images.py, audio.py), kept in the database
    beside the text so that a conversation is whole wherever the database goes
    (docs/LAB_UI.md, "Images and audio"). One table for both: they are stored, served,
    resent, copied and exported alike, and share one order within their message."""

    KINDS = [("image", "image"), ("audio", "audio")]  # inference.protocol.media's part types

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="attachments")
    position = models.PositiveSmallIntegerField()
    kind = models.CharField(max_length=8, choices=KINDS)
    # An image's type is sniffed from its bytes (png, jpeg or webp); a clip's follows its
    # checked format (audio/wav or audio/mpeg).
    mime = models.CharField(max_length=32)
    sha256 = models.CharField(max_length=64)
    data = models.BinaryField()

    class Meta:
        ordering = ["message_id", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["message", "position"], name="unique_attachment_position"
            )
        ]

    def __str__(self) -> str:
        return f"{self.mime} {self.kind} {self.position + 1} of message {self.message_id}"


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
    winner = models.PositiveSmallIntegerField(null=True)  # index into variants; null: a tie
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        if self.winner is None:
            return f"a tie ({' vs '.join(self.variants)})"
        return f"{self.variants[self.winner]} preferred ({' vs '.join(self.variants)})"
