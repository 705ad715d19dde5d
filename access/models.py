from django.db import models

LIMIT_HELP = "{what}; empty: the server's default ({setting}); 0: no limit."


class RateFields(models.Model):
    """Requests and tokens (prompt plus completion) a caller may use per rate window."""

    rpm = models.PositiveIntegerField(
        "requests per minute", null=True, blank=True,
        help_text=LIMIT_HELP.format(what="Requests per minute", setting="MLXLAB_RATE_LIMIT_RPM"),
    )  # fmt: skip
    tpm = models.PositiveIntegerField(
        "tokens per minute", null=True, blank=True,
        help_text=LIMIT_HELP.format(what="Tokens per minute", setting="MLXLAB_RATE_LIMIT_TPM"),
    )  # fmt: skip

    class Meta:
        abstract = True


class ApiKey(RateFields):
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


class UserLimits(RateFields):
    """A user's own limits: the rates of their lab session, and a monthly token budget
    that their keys and their session share."""

    user = models.OneToOneField("auth.User", on_delete=models.CASCADE, related_name="limits")
    monthly_tokens = models.PositiveBigIntegerField(
        "monthly token budget", null=True, blank=True,
        help_text="Tokens (prompt plus completion) per calendar month (UTC); empty: no budget.",
    )  # fmt: skip

    class Meta:
        verbose_name = verbose_name_plural = "user limits"

    def __str__(self) -> str:
        return f"limits of {self.user}"


class UsageDay(models.Model):
    """What one caller used of one model on one day (UTC): one row, counted up atomically.

    `caller` tells keys, sessions and the static keys apart ("key:12", "user:3",
    "static", "anonymous"); `user` and `key` are there to group by.
    """

    day = models.DateField()
    caller = models.CharField(max_length=40)
    model = models.CharField(max_length=200)
    user = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="usage"
    )
    key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="usage"
    )
    requests = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cached_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["day", "caller", "model"], name="one_usage_row")
        ]
        indexes = [models.Index(fields=["user", "day"])]
        ordering = ["-day", "caller", "model"]
