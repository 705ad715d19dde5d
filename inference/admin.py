from django.contrib import admin
from django.utils.html import format_html, format_html_join

from .models import LanguageModel, StoredResponse
from .response_store import response_chain


@admin.register(LanguageModel)
class LanguageModelAdmin(admin.ModelAdmin):
    list_display = ["name", "architecture", "quantization", "size_bytes", "context_length"]
    search_fields = ["name", "architecture"]
    readonly_fields = ["created_at"]


@admin.register(StoredResponse)
class StoredResponseAdmin(admin.ModelAdmin):
    """Stored responses are history: searchable, filterable, never edited by hand."""

    list_display = ["id", "model", "status", "short_text", "size_bytes", "created_at", "expires_at"]
    list_filter = ["model", "status", "created_at"]
    search_fields = ["id", "model", "output_text"]
    readonly_fields = ["conversation"]
    fields = ["conversation"]
    list_select_related = ["previous"]

    @admin.display(description="output")
    def short_text(self, obj: StoredResponse) -> str:
        return obj.output_text[:80]

    @admin.display(description="conversation chain")
    def conversation(self, obj: StoredResponse) -> str:
        chain = response_chain(response_id=obj.id) or [obj]
        turns = []
        for stored in chain:
            items = format_html_join(
                "", "<li><b>{}</b> {}</li>", ((label, text) for label, text in _turn_lines(stored))
            )
            turns.append(format_html("<h3>{} · {}</h3><ul>{}</ul>", stored.id, stored.model, items))
        return format_html_join("", "{}", ((turn,) for turn in turns))

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


def _turn_lines(stored: StoredResponse):
    if stored.instructions:
        yield "instructions", stored.instructions
    for item in stored.input_items + stored.output_items:
        kind = item.get("type", "message")
        if kind == "message":
            content = item.get("content")
            text = (
                content
                if isinstance(content, str)
                else "".join(
                    part.get("text", "") for part in content or [] if isinstance(part, dict)
                )
            )
            yield item.get("role", "?"), text
        elif kind == "function_call":
            yield "function call", f"{item.get('name')}({item.get('arguments')})"
        elif kind == "function_call_output":
            yield "function output", str(item.get("output"))
        elif kind == "reasoning":
            yield "reasoning", "".join(p.get("text", "") for p in item.get("content") or [])
