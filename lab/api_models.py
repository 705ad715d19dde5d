"""/api/models: the registry for the models page, load and unload, GGUF import."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access.error_responses import errors
from access.permissions import StaffOnly
from inference.engines import drain_model_worker, load_model_worker, unload_model_worker
from inference.model_registry import DraftRefused, model_named, model_set_draft
from inference.models import LanguageModel

from .model_imports import ImportRefused, import_status, start_import
from .model_info import model_details, model_summary
from .model_removal import DeleteRefused, delete_model


def record_or_404(name: str) -> LanguageModel:
    record = model_named(name)
    if record is None:
        raise NotFound(f"No model named {name!r}.")
    return record


class ModelListApi(APIView):
    @extend_schema(
        responses={200: OpenApiTypes.OBJECT, **errors(403)},
        summary="The model registry",
        operation_id="registry_models_list",
    )
    def get(self, request: Request) -> Response:
        return Response(
            {
                "results": [
                    model_summary(r) for r in LanguageModel.objects.select_related("draft_model")
                ]
            }
        )


class ModelDetailApi(APIView):
    def get_permissions(self):
        # Reading is for everyone the page serves; changing or deleting a model, staff.
        changes = self.request.method in ("PATCH", "DELETE")
        return [StaffOnly()] if changes else super().get_permissions()

    @extend_schema(
        responses={200: OpenApiTypes.OBJECT, **errors(403, 404)},
        summary="One model",
        operation_id="registry_models_retrieve",
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(model_details(record_or_404(name), staff=request.user.is_staff))

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT, **errors(400, 403, 404)},
        summary="Change a model's settings: its default draft model",
    )
    def patch(self, request: Request, name: str) -> Response:
        record = record_or_404(name)
        data = request.data if isinstance(request.data, dict) else None
        if data is None or set(data) - EDITABLE:
            raise ValidationError({"detail": f"expected a JSON object of {sorted(EDITABLE)}"})
        if "draft_model" in data:
            draft = data["draft_model"] or None  # "" or null: no default draft
            if draft is not None and not isinstance(draft, str):
                raise ValidationError({"detail": "draft_model must be a model's name or null"})
            try:
                model_set_draft(record=record, draft_name=draft)
            except DraftRefused as error:
                raise ValidationError({"detail": str(error)}) from None
        return Response(model_details(record, staff=True))

    @extend_schema(
        responses={200: OpenApiTypes.OBJECT, **errors(403, 404, 409)},
        summary="Delete a model: its registry row, and its files if they lie under var/models",
    )
    def delete(self, request: Request, name: str) -> Response:
        try:
            return Response(delete_model(record_or_404(name)))
        except DeleteRefused as error:
            return Response({"detail": str(error)}, status=409)


EDITABLE = {"draft_model"}


class ModelLoadApi(APIView):
    permission_classes = [StaffOnly]

    @extend_schema(request=None, responses={200: OpenApiTypes.OBJECT, **errors(403, 404, 409)})
    def post(self, request: Request, name: str) -> Response:
        try:
            load_model_worker(record_or_404(name))
        except Exception as error:  # a broken folder: the page shows why
            return Response({"detail": f"could not load {name}: {error}"}, status=409)
        return Response({"name": name, "loaded": True})


class ModelUnloadApi(APIView):
    permission_classes = [StaffOnly]

    @extend_schema(request=None, responses={200: OpenApiTypes.OBJECT, **errors(403, 404)})
    def post(self, request: Request, name: str) -> Response:
        unload_model_worker(record_or_404(name).name)
        return Response({"name": name, "loaded": False})


class ModelDrainApi(APIView):
    """An operator's drain: the model takes no new requests, finishes what its workers hold,
    then stops; the next request loads it again. It answers at once (202); `/engine` shows
    its workers `draining` meanwhile and GET /api/events the steps."""

    permission_classes = [StaffOnly]

    @extend_schema(request=None, responses={202: OpenApiTypes.OBJECT, **errors(403, 404, 409)})
    def post(self, request: Request, name: str) -> Response:
        if not drain_model_worker(record_or_404(name).name):
            return Response({"detail": f"{name} has no local worker to drain"}, status=409)
        return Response({"name": name, "draining": True}, status=status.HTTP_202_ACCEPTED)


class ModelImportApi(APIView):
    permission_classes = [StaffOnly]

    @extend_schema(
        request=OpenApiTypes.OBJECT, responses={202: OpenApiTypes.OBJECT, **errors(400, 403, 415)}
    )
    def post(self, request: Request) -> Response:
        data = request.data if isinstance(request.data, dict) else None
        if data is None:
            raise ValidationError({"detail": "expected a JSON object"})
        path, name = data.get("path"), data.get("name") or None
        if not isinstance(path, str) or not path.strip():
            raise ValidationError({"detail": "path required"})
        if name is not None and (not isinstance(name, str) or not _is_slug(name)):
            raise ValidationError({"detail": "name must use only a-z, 0-9, '-' and '_'"})
        try:
            started = start_import(path.strip(), name)
        except ImportRefused as error:
            raise ValidationError({"detail": str(error)}) from None
        return Response(started.as_dict(), status=status.HTTP_202_ACCEPTED)


def _is_slug(name: str) -> bool:
    return (
        bool(name)
        and len(name) <= 200
        and all(c.isalnum() and c.isascii() or c in "-_" for c in name)
    )


class ModelImportStatusApi(APIView):
    permission_classes = [StaffOnly]

    @extend_schema(responses={200: OpenApiTypes.OBJECT, **errors(403, 404)})
    def get(self, request: Request, import_id: str) -> Response:
        found = import_status(import_id)
        if found is None:
            raise NotFound("No such import.")
        return Response(found.as_dict())
