from django.contrib import admin
from django.utils.html import format_html, format_html_join

from .models import Adapter, LanguageModel, StoredResponse
from .response_store import BrokenChain, response_chain


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
        try:
            chain = response_chain(response_id=obj.id, owner=None) or [obj]
        except BrokenChain:  # show this turn alone
            chain = [obj]
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
            yield item.get("role", "?"), content if isinstance(content, str) else _texts(content)
        elif kind == "function_call":
            yield "function call", f"{item.get('name')}({item.get('arguments')})"
        elif kind == "function_call_output":
            yield "function output", str(item.get("output"))
        elif kind == "reasoning":
            yield "reasoning", _texts(item.get("content"))


def _texts(parts) -> str:
    # Input is stored as the client sent it: a reasoning item's content may be `true`.
    if not isinstance(parts, list):
        return ""
    return "".join(str(part.get("text", "")) for part in parts if isinstance(part, dict))


@admin.register(Adapter)
class AdapterAdmin(admin.ModelAdmin):
    list_display = ["name", "base_model", "fine_tune_type", "created_at"]
    list_filter = ["base_model", "fine_tune_type"]
    search_fields = ["name", "base_model"]
    readonly_fields = ["job_id", "summary", "created_at"]
