from django.contrib import admin, messages

from .api_keys import api_key_assign_secret, api_key_revoke
from .models import ApiKey


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys show only their prefix; a new key is shown once, in the message after saving."""

    list_display = ["prefix", "label", "user", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at", "created_at"]
    search_fields = ["prefix", "label", "user__username"]
    readonly_fields = ["prefix", "created_at", "last_used_at", "revoked_at"]
    list_select_related = ["user"]
    actions = ["revoke"]

    def get_fields(self, request, obj=None):
        return ["user", "label"] if obj is None else ["user", "label", *self.readonly_fields]

    def get_readonly_fields(self, request, obj=None):
        # A key never changes hands; only its label may be edited.
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
