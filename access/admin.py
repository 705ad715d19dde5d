from django.contrib import admin, messages

from .api_keys import api_key_assign_secret, api_key_revoke
from .models import ApiKey, UsageDay, UserLimits


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys show only their prefix; a new key is shown once, in the message after saving."""

    list_display = [
        "prefix", "label", "user", "rpm", "tpm", "created_at", "last_used_at", "revoked_at",
    ]  # fmt: skip
    list_filter = ["revoked_at", "created_at"]
    search_fields = ["prefix", "label", "user__username"]
    readonly_fields = ["prefix", "created_at", "last_used_at", "revoked_at"]
    list_select_related = ["user"]
    actions = ["revoke"]

    def get_fields(self, request, obj=None):
        editable = ["user", "label", "rpm", "tpm"]
        return editable if obj is None else [*editable, *self.readonly_fields]

    def get_readonly_fields(self, request, obj=None):
        # A key never changes hands; only its label and limits may be edited.
        return self.readonly_fields if obj is None else ["user", *self.readonly_fields]

    def save_model(self, request, obj: ApiKey, form, change: bool) -> None:
        raw = None if change else api_key_assign_secret(obj)
        super().save_model(request, obj, form, change)
        if raw is not None:
            self.message_user(
                request,
                f"The new API key is {raw} - copy it now: it will not be shown again.",
                messages.WARNING,
            )

    @admin.action(description="Revoke the selected API keys")
    def revoke(self, request, queryset) -> None:
        for key in queryset.filter(revoked_at__isnull=True):
            api_key_revoke(key=key)
        self.message_user(request, "Revoked.", messages.SUCCESS)


@admin.register(UserLimits)
class UserLimitsAdmin(admin.ModelAdmin):
    """A user's lab-session rates and monthly token budget (their keys share the budget)."""

    list_display = ["user", "rpm", "tpm", "monthly_tokens"]
    search_fields = ["user__username"]
    autocomplete_fields = ["user"]


@admin.register(UsageDay)
class UsageDayAdmin(admin.ModelAdmin):
    """The usage record, as the requests left it: read, never edited."""

    list_display = ["day", "caller", "user", "model", "requests", "prompt_tokens",
                    "completion_tokens", "cached_tokens"]  # fmt: skip
    list_filter = ["day", "model"]
    search_fields = ["caller", "user__username", "model"]
    date_hierarchy = "day"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
