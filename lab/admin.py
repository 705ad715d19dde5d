from django.contrib import admin

from .models import Conversation, Message, Preset, SideBySide


class MessageInline(admin.TabularInline):
    model = Message
    extra = 0
    fields = ["role", "content", "parent", "shown", "reasoning", "stats", "created_at"]
    readonly_fields = fields


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ["title", "owner", "model", "updated_at"]
    list_filter = ["model", "updated_at"]
    search_fields = ["title", "messages__content"]
    inlines = [MessageInline]


@admin.register(Preset)
class PresetAdmin(admin.ModelAdmin):
    list_display = ["name", "owner"]
    search_fields = ["name", "system_prompt"]


@admin.register(SideBySide)
class SideBySideAdmin(admin.ModelAdmin):
    list_display = ["prompt", "variants", "winner", "owner", "created_at"]
    readonly_fields = ["conversations"]
