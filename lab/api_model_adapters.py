"""POST /api/models/<name>/adapters and DELETE /api/models/<name>/adapters/<adapter>: an
operator mounts a registered adapter on the model's running workers (its weights loaded
ahead of the requests that name it, and again after a worker's restart) or unmounts it,
with no restart (inference/workers/adapter_mounts.py). Staff, as drain and load are."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access.error_responses import errors
from access.permissions import StaffOnly
from inference.engines import mount_model_adapter, mounted_adapters, unmount_model_adapter
from inference.models import Adapter
from inference.protocol.adapters import AdapterRef
from inference.workers.adapter_mounts import AdapterRefused

from .api_models import record_or_404

USAGE = 'expected {"adapter": "<the name of an adapter trained on this model>"}'


class ModelAdaptersApi(APIView):
    permission_classes = [StaffOnly]

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT, **errors(400, 403, 404, 409)},
        summary="Mount an adapter on the model's running workers",
    )
    def post(self, request: Request, name: str) -> Response:
        record = record_or_404(name)
        data = request.data if isinstance(request.data, dict) else {}
        adapter = data.get("adapter")
        if not isinstance(adapter, str) or not adapter:
            raise ValidationError({"detail": USAGE})
        found = Adapter.objects.filter(name=adapter).first()
        if found is None:
            raise NotFound(f"No adapter named {adapter!r}.")
        if found.base_model != record.name:
            trained = f"The adapter '{adapter}' was trained on {found.base_model}"
            raise ValidationError({"detail": f"{trained}, not {record.name}"})
        try:
            mounted = mount_model_adapter(record.name, AdapterRef(found.name, found.path))
        except AdapterRefused as error:
            return Response({"detail": error.message}, status=error.status)
        return Response(mounted)


class ModelAdapterApi(APIView):
    permission_classes = [StaffOnly]

    @extend_schema(
        request=None,
        responses={200: OpenApiTypes.OBJECT, **errors(403, 404, 409)},
        summary="Unmount an adapter: requests running under it finish first",
    )
    def delete(self, request: Request, name: str, adapter: str) -> Response:
        record = record_or_404(name)
        known = adapter in mounted_adapters(record.name)
        if not known and not Adapter.objects.filter(name=adapter).exists():
            raise NotFound(f"No adapter named {adapter!r}.")
        try:
            return Response(unmount_model_adapter(record.name, adapter))
        except AdapterRefused as error:
            return Response({"detail": error.message}, status=error.status)
