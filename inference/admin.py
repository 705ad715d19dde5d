from django.contrib import admin

from .models import LanguageModel


@admin.register(LanguageModel)
class LanguageModelAdmin(admin.ModelAdmin):
    list_display = ["name", "architecture", "quantization", "size_bytes", "context_length"]
    search_fields = ["name", "architecture"]
    readonly_fields = ["created_at"]
