"""The first /api endpoints: who am I, my API keys, and the server's access settings."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from labsettings import lab_settings

from .api_keys import api_key_create, api_key_revoke, keys_exist, static_key_digests
from .authentication import request_key
from .error_responses import errors
from .models import ApiKey
from .permissions import KeyManagement, StaffOnly
from .serializers import (
    AccessSettingsSerializer,
    ApiKeyCreatedSerializer,
    ApiKeyCreateSerializer,
    ApiKeySerializer,
    ApiKeyUpdateSerializer,
    MeSerializer,
)


class MeApi(APIView):
    @extend_schema(responses={200: MeSerializer, **errors(403)}, summary="Who am I")
    def get(self, request: Request) -> Response:
        key = request_key(request)
        user = request.user
        return Response(
            {
                "id": user.pk,
                "username": user.get_username(),
                "is_staff": user.is_staff,
                "authenticated_by": "api_key" if key else "session",
                "api_key": key.label if key else None,
            }
        )


class ApiKeyListCreateApi(APIView):
    """The user's own API keys (revoked ones too); a new key is shown once, on creation."""

    permission_classes = [KeyManagement]

    @extend_schema(responses={200: ApiKeySerializer(many=True), **errors(403)})
    def get(self, request: Request) -> Response:
        keys = ApiKey.objects.filter(user=request.user)
        return Response(ApiKeySerializer(keys, many=True).data)

    @extend_schema(
        request=ApiKeyCreateSerializer,
        responses={201: ApiKeyCreatedSerializer, **errors(400, 403, 415)},
    )
    def post(self, request: Request) -> Response:
        serializer = ApiKeyCreateSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        fields = serializer.validated_data
        key, raw = api_key_create(
            user=request.user, label=fields["label"], rpm=fields.get("rpm"), tpm=fields.get("tpm")
        )
        body = ApiKeyCreatedSerializer(key).data
        body["key"] = raw
        return Response(body, status=status.HTTP_201_CREATED)


class ApiKeyRevokeApi(APIView):
    permission_classes = [KeyManagement]

    @extend_schema(
        request=ApiKeyUpdateSerializer,
        responses={200: ApiKeySerializer, **errors(400, 403, 404, 415)},
        summary="Change one of my keys' label or rate limits",
    )
    def patch(self, request: Request, key_id: int) -> Response:
        key = ApiKey.objects.filter(user=request.user, pk=key_id).first()
        if key is None:
            return Response({"detail": "No such API key of yours."}, status=404)
        serializer = ApiKeyUpdateSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        for name, value in serializer.validated_data.items():
            setattr(key, name, value)
        key.save(update_fields=list(serializer.validated_data) or None)
        return Response(ApiKeySerializer(key).data)

    @extend_schema(responses={204: None, **errors(403, 404)}, summary="Revoke one of my keys")
    def delete(self, request: Request, key_id: int) -> Response:
        key = ApiKey.objects.filter(user=request.user, pk=key_id).first()
        if key is None:
            return Response({"detail": "No such API key of yours."}, status=404)
        api_key_revoke(key=key)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AccessSettingsApi(APIView):
    """How the server guards itself; staff only (it is the lab's token settings page)."""

    permission_classes = [StaffOnly]

    @extend_schema(responses={200: AccessSettingsSerializer, **errors(403)})
    def get(self, request: Request) -> Response:
        return Response(
            {
                "api_key_required": keys_exist(),
                "static_api_keys": len(static_key_digests()),
                "active_api_keys": ApiKey.objects.filter(revoked_at__isnull=True).count(),
                "revoked_api_keys": ApiKey.objects.filter(revoked_at__isnull=False).count(),
                "allow_open_network_api": lab_settings.allow_open_network_api,
                "cors_allowed_origins": list(lab_settings.cors_allowed_origins),
                "max_request_bytes": lab_settings.max_request_bytes,
                "max_request_bytes_by_path": dict(lab_settings.max_request_bytes_by_path),
                "max_tokens_limit": lab_settings.max_tokens_limit or None,
            }
        )


@csrf_exempt  # a 404 whatever the method: nothing here to protect
def not_found(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"detail": f"Unknown endpoint {request.path}"}, status=404)
