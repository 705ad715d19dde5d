from django.contrib import admin

from .models import HubToken


@admin.register(HubToken)
class HubTokenAdmin(admin.ModelAdmin):
    """Only that a token exists, whose it is, when and by whom it was set: never the token."""

    list_display = ["__str__", "username", "set_by", "set_at"]
    fields = ["username", "set_by", "set_at"]
    readonly_fields = fields

    def has_add_permission(self, request) -> bool:
        return False  # saved (encrypted) from the lab's settings page or the API

    def has_change_permission(self, request, obj=None) -> bool:
        return False
