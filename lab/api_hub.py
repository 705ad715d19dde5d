"""/api/hub/models (search the Hub) and /api/models/<name>/update (is a newer commit there)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access.error_responses import errors
from publishing.hub_repos import RepoRefused, failure, offline, reading_api
from publishing.hub_search import SORTS, search_models

from .api_models import record_or_404

MAX_LIMIT = 50
TEXT_PARAMS = ("search", "author", "library", "pipeline_tag")


class HubUnavailable(APIException):
    status_code = 502
    default_detail = "the Hub could not be asked"


def _text(request: Request, name: str) -> str:
    value = request.query_params.get(name, "").strip()
    if len(value) > 200:
        raise ValidationError({"detail": f"{name} must be at most 200 characters"})
    return value


def _limit(request: Request) -> int:
    raw = request.query_params.get("limit", "20")
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise ValidationError({"detail": f"limit must be a whole number from 1 to {MAX_LIMIT}"})
    return int(raw)


class HubModelSearchApi(APIView):
    @extend_schema(
        parameters=[
            *(OpenApiParameter(name, str, required=False) for name in TEXT_PARAMS),
            OpenApiParameter("sort", str, enum=list(SORTS), required=False),
            OpenApiParameter("limit", int, required=False),
        ],
        responses={200: OpenApiTypes.OBJECT, **errors(400, 403, 502)},
        summary="Search the Hugging Face Hub for models, MLX-ready ones first",
    )
    def get(self, request: Request) -> Response:
        sort = request.query_params.get("sort", "downloads")
        if sort not in SORTS:
            raise ValidationError({"detail": f"sort must be one of {', '.join(SORTS)}"})
        terms = {name: _text(request, name) for name in TEXT_PARAMS}
        try:
            found = search_models(**terms, sort=sort, limit=_limit(request))
        except RepoRefused as error:
            raise HubUnavailable(str(error)) from None
        return Response(found)


class ModelUpdateApi(APIView):
    @extend_schema(
        responses={200: OpenApiTypes.OBJECT, **errors(403, 404, 409, 502)},
        summary="Whether the Hub has a newer commit for a pulled model's revision",
    )
    def get(self, request: Request, name: str) -> Response:
        record = record_or_404(name)
        if not record.repo_id:
            return Response({"detail": f"'{name}' was not pulled from the Hub"}, status=409)
        if offline():
            return Response({"detail": "the lab is offline (HF_HUB_OFFLINE)"}, status=409)
        try:
            latest = reading_api().model_info(record.repo_id, revision=record.revision).sha
        except Exception as error:
            raise HubUnavailable(str(failure(error, record.repo_id, record.revision))) from None
        return Response(
            {
                "name": name,
                "repo_id": record.repo_id,
                "revision": record.revision,
                "commit": record.commit_sha,
                "latest": latest,
                "update_available": latest != record.commit_sha,
            }  # fmt: skip
        )
