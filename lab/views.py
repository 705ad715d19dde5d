"""The lab's pages: templates only; their data comes from /api and the chat websocket."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

from inference.engines import default_model_name
from labsettings import lab_settings as settings_table


@login_required
@ensure_csrf_cookie  # the page's scripts send it back on every unsafe /api call
def chat(request: HttpRequest) -> HttpResponse:
    context = {
        "default_model": default_model_name(),
        # The page's max tokens starts here (the model's context caps it); the API's own
        # default, for requests that set none, is another setting.
        "chat_max_tokens": settings_table.chat_max_tokens,
        # What the server takes of attached images and audio, checked again there: the
        # page refuses a file past them at once rather than after its upload.
        "attachment_limits": {
            "max_images": settings_table.max_images,
            "max_image_bytes": settings_table.max_image_bytes,
            "max_audio_seconds": settings_table.max_audio_seconds,
            "max_message_bytes": settings_table.max_request_bytes,
        },
    }
    return render(request, "lab/chat.html", context)


@login_required
@ensure_csrf_cookie
def side_by_side(request: HttpRequest) -> HttpResponse:
    # The chat's sampling fields, max tokens starting where the chat's does.
    context = {
        "default_model": default_model_name(),
        "chat_max_tokens": settings_table.chat_max_tokens,
    }
    return render(request, "lab/side_by_side.html", context)


@login_required
@ensure_csrf_cookie
def models(request: HttpRequest) -> HttpResponse:
    return render(request, "lab/models.html")


@login_required
@ensure_csrf_cookie
def lab_settings(request: HttpRequest) -> HttpResponse:
    return render(request, "lab/settings.html")


@login_required
def usage(request: HttpRequest) -> HttpResponse:
    return render(request, "lab/usage.html")
