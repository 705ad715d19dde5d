"""/api/conversations, /api/messages and /api/presets: the chat page's saved state."""

from __future__ import annotations

from django.db.models import Count, Q
from django.http import HttpResponse
from django.utils.http import content_disposition_header
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access.error_responses import errors

from .conversation_export import FORMATS, export
from .conversations import branch, conversation_summary, message_dict, title_from
from .message_attachments import attachment_of, page_attachments
from .message_tree import delete_message, path_with_versions, show
from .models import Conversation, Message, Preset

KIND_NAMES = {str: " string", dict: "n object"}
EDITABLE = {"title": str, "model": str, "system_prompt": str, "params": dict}


def _object(request: Request) -> dict:
    if not isinstance(request.data, dict):
        raise ValidationError({"detail": "expected a JSON object"})
    return request.data


def _fields(data: dict, allowed: dict) -> dict:
    """The known fields of a body, each of its type; anything else is a 400."""
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ValidationError({"detail": f"unknown field {unknown[0]!r}"})
    for name, kind in allowed.items():
        if name in data and not isinstance(data[name], kind):
            raise ValidationError({"detail": f"{name} must be a{KIND_NAMES[kind]}"})
    return data


def _conversation(request: Request, conversation_id: int) -> Conversation:
    conversation = Conversation.objects.filter(owner=request.user, id=conversation_id).first()
    if conversation is None:
        raise NotFound("No such conversation of yours.")
    return conversation


def conversation_dict(conversation: Conversation) -> dict:
    """The conversation with its shown branch, each message with its turn's versions."""
    path = path_with_versions(conversation)
    attachments = page_attachments(m for m, _ in path)
    return {
        **conversation_summary(conversation),
        "system_prompt": conversation.system_prompt,
        "params": conversation.params,
        "created_at": conversation.created_at.isoformat(),
        "messages": [message_dict(m, v, attachments[m.id]) for m, v in path],
    }


def _message_of(conversation: Conversation, request: Request) -> Message:
    message_id = _object(request).get("message")
    message = (
        conversation.messages.filter(id=message_id).first()
        if isinstance(message_id, int) and not isinstance(message_id, bool)
        else None
    )
    if message is None:
        raise ValidationError(
            {"detail": "message must be the id of a message in this conversation"}
        )
    return message


# ?kind= of the conversation list: the chat page's own, or the side-by-side page's runs.
KINDS = {"chat": Q(side_by_side_run=""), "side_by_side": ~Q(side_by_side_run="")}


class ConversationListApi(APIView):
    @extend_schema(
        responses={200: OpenApiTypes.OBJECT, **errors(400, 403)},
        parameters=[OpenApiParameter("q", str), OpenApiParameter("kind", str, enum=list(KINDS))],
        summary="My conversations",
        operation_id="conversations_list",
    )
    def get(self, request: Request) -> Response:
        conversations = Conversation.objects.filter(owner=request.user)
        if kind := request.query_params.get("kind"):
            if kind not in KINDS:
                raise ValidationError({"detail": f"kind must be one of {', '.join(KINDS)}"})
            conversations = conversations.filter(KINDS[kind])
        if query := request.query_params.get("q", "").strip():
            conversations = conversations.filter(
                Q(title__icontains=query) | Q(messages__content__icontains=query)
            ).distinct()
        conversations = conversations.annotate(message_count=Count("messages", distinct=True))
        results = [
            {**conversation_summary(c), "message_count": c.message_count} for c in conversations
        ]
        return Response({"results": results})

    @extend_schema(
        request=OpenApiTypes.OBJECT, responses={201: OpenApiTypes.OBJECT, **errors(400, 403, 415)}
    )
    def post(self, request: Request) -> Response:
        data = _fields(_object(request), EDITABLE)
        conversation = Conversation.objects.create(
            owner=request.user,
            title=title_from(data.get("title") or "New chat"),
            model=data.get("model", ""),
            system_prompt=data.get("system_prompt", ""),
            params=data.get("params", {}),
        )
        return Response(conversation_dict(conversation), status=status.HTTP_201_CREATED)


class ConversationApi(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT, **errors(403, 404)})
    def get(self, request: Request, conversation_id: int) -> Response:
        return Response(conversation_dict(_conversation(request, conversation_id)))

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT, **errors(400, 403, 404, 415)},
    )
    def patch(self, request: Request, conversation_id: int) -> Response:
        conversation = _conversation(request, conversation_id)
        data = _fields(_object(request), EDITABLE)
        if "title" in data:
            if not data["title"].strip():
                raise ValidationError({"detail": "title must not be blank"})
            data = {**data, "title": title_from(data["title"])}
        for name, value in data.items():
            setattr(conversation, name, value)
        conversation.save()
        return Response(conversation_dict(conversation))

    @extend_schema(responses={204: None, **errors(403, 404)})
    def delete(self, request: Request, conversation_id: int) -> Response:
        _conversation(request, conversation_id).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


class ConversationBranchApi(APIView):
    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={201: OpenApiTypes.OBJECT, **errors(400, 403, 404, 415)},
    )
    def post(self, request: Request, conversation_id: int) -> Response:
        conversation = _conversation(request, conversation_id)
        message = _message_of(conversation, request)
        return Response(conversation_dict(branch(conversation, message)), status=201)


class ConversationShowApi(APIView):
    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT, **errors(400, 403, 404, 415)},
        summary="Show another version of a turn (and the branch that follows it)",
    )
    def post(self, request: Request, conversation_id: int) -> Response:
        conversation = _conversation(request, conversation_id)
        show(_message_of(conversation, request))
        return Response(conversation_dict(conversation))


class ConversationExportApi(APIView):
    @extend_schema(
        # Not `format`: DRF reads that one as its own renderer override.
        parameters=[OpenApiParameter("as", str, enum=list(FORMATS), default="markdown")],
        responses={
            (200, "text/markdown"): OpenApiTypes.STR,
            (200, "application/json"): OpenApiTypes.OBJECT,
            **errors(400, 403, 404),
        },
        summary="A conversation as a Markdown or JSON (OpenAI messages) file",
    )
    def get(self, request: Request, conversation_id: int) -> HttpResponse:
        conversation = _conversation(request, conversation_id)
        kind = request.query_params.get("as", "markdown")
        if kind not in FORMATS:
            raise ValidationError({"detail": f"as must be one of {', '.join(FORMATS)}"})
        text, content_type, filename = export(conversation, kind)
        response = HttpResponse(text, content_type=content_type)
        response["Content-Disposition"] = content_disposition_header(True, filename)
        return response


class MessageApi(APIView):
    @extend_schema(responses={204: None, **errors(403, 404)})
    def delete(self, request: Request, message_id: int) -> Response:
        message = Message.objects.filter(conversation__owner=request.user, id=message_id).first()
        if message is None:
            raise NotFound("No such message of yours.")
        delete_message(message)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MessageAttachmentApi(APIView):
    @extend_schema(
        responses={
            (200, "image/*"): OpenApiTypes.BINARY,
            (200, "audio/*"): OpenApiTypes.BINARY,
            **errors(403, 404),
        },
        summary="An image or audio clip a message of mine carried",
    )
    def get(self, request: Request, message_id: int, position: int) -> HttpResponse:
        attachment = attachment_of(request.user, message_id, position)
        if attachment is None:
            raise NotFound("No such attachment of yours.")
        response = HttpResponse(bytes(attachment.data), content_type=attachment.mime)
        # A message's attachments never change: its id and position name these bytes for good.
        response["Cache-Control"] = "private, max-age=31536000, immutable"
        return response


def preset_dict(preset: Preset) -> dict:
    return {
        "id": preset.id,
        "name": preset.name,
        "system_prompt": preset.system_prompt,
        "params": preset.params,
    }


class PresetListApi(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT, **errors(403)}, summary="My presets")
    def get(self, request: Request) -> Response:
        presets = Preset.objects.filter(owner=request.user)
        return Response({"results": [preset_dict(p) for p in presets]})

    @extend_schema(
        request=OpenApiTypes.OBJECT, responses={201: OpenApiTypes.OBJECT, **errors(400, 403, 415)}
    )
    def post(self, request: Request) -> Response:
        data = _fields(_object(request), {"name": str, "system_prompt": str, "params": dict})
        name = data.get("name", "").strip()
        if not name or len(name) > 100:
            raise ValidationError({"detail": "name must be 1 to 100 characters"})
        preset, _ = Preset.objects.update_or_create(
            owner=request.user,
            name=name,
            defaults={
                "system_prompt": data.get("system_prompt", ""),
                "params": data.get("params", {}),
            },
        )
        return Response(preset_dict(preset), status=status.HTTP_201_CREATED)


class PresetApi(APIView):
    @extend_schema(responses={204: None, **errors(403, 404)})
    def delete(self, request: Request, preset_id: int) -> Response:
        deleted, _ = Preset.objects.filter(owner=request.user, id=preset_id).delete()
        if not deleted:
            raise NotFound("No such preset of yours.")
        return Response(status=status.HTTP_204_NO_CONTENT)
