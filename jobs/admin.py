from django.contrib import admin

from .models import Job


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """Jobs as they ran: read-only here; the lab's jobs page submits and cancels them."""

    list_display = ["id", "kind", "status", "progress", "owner", "created_at", "finished_at"]
    list_filter = ["kind", "status", "created_at"]
    search_fields = ["id", "message", "error"]
    readonly_fields = [field.name for field in Job._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False
