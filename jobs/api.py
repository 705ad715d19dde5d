"""/api/jobs, /api/datasets/uploads and /api/adapters: the lab's long work (staff only)."""

from __future__ import annotations

from pathlib import Path

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access.error_responses import errors
from access.permissions import StaffOnly
from inference.models import Adapter

from .context import JobParamsError
from .events import job_dict
from .models import Job
from .submission import BrokerUnavailable, cancel_job, submit_job

LIST_LIMIT = 200


def _job(job_id) -> Job:
    job = Job.objects.filter(id=job_id).select_related("owner").first()
    if job is None:
        raise NotFound("No such job.")
    return job


def _submitted(kind, params, owner) -> Response:
    """Submit a job: 202 with it, 400 for bad params, 503 when the queue does not answer."""
    try:
        job = submit_job(kind=kind, params=params, owner=owner)
    except JobParamsError as error:
        raise ValidationError({"detail": str(error)}) from None
    except BrokerUnavailable as error:
        return Response({"detail": str(error)}, status=status.HTTP_503_SERVICE_UNAVAILABLE)
    return Response(
        job_dict(job), status=status.HTTP_202_ACCEPTED, headers={"Location": f"/api/jobs/{job.id}"}
    )


class JobListApi(APIView):
    permission_classes = [StaffOnly]

    @extend_schema(
        responses={200: OpenApiTypes.OBJECT, **errors(403)},
        summary="Jobs, newest first",
        operation_id="jobs_list",
    )
    def get(self, request: Request) -> Response:
        jobs = Job.objects.select_related("owner")
        for name in ("kind", "status"):
            if value := request.query_params.get(name):
                jobs = jobs.filter(**{name: value})
        return Response({"results": [job_dict(job) for job in jobs[:LIST_LIMIT]]})

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={202: OpenApiTypes.OBJECT, **errors(400, 403, 415, 503)},
        summary="Queue a job: pull, quantize, finetune, dataset or evaluate",
    )
    def post(self, request: Request) -> Response:
        if not isinstance(request.data, dict):
            raise ValidationError({"detail": "expected a JSON object"})
        unknown = sorted(set(request.data) - {"kind", "params"})
        if unknown:
            raise ValidationError({"detail": f"unknown field {unknown[0]!r}"})
        return _submitted(request.data.get("kind"), request.data.get("params", {}), request.user)


class JobApi(APIView):
    permission_classes = [StaffOnly]

    @extend_schema(responses={200: OpenApiTypes.OBJECT, **errors(403, 404)}, summary="One job")
    def get(self, request: Request, job_id) -> Response:
        return Response(job_dict(_job(job_id)))


class JobCancelApi(APIView):
    permission_classes = [StaffOnly]

    @extend_schema(request=None, responses={200: OpenApiTypes.OBJECT, **errors(403, 404, 409)})
    def post(self, request: Request, job_id) -> Response:
        job = _job(job_id)
        if job.finished:
            return Response({"detail": f"the job has already {job.status}"}, status=409)
        return Response(job_dict(cancel_job(job)))


class JobEvaluateAgainstBaseApi(APIView):
    permission_classes = [StaffOnly]

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={202: OpenApiTypes.OBJECT, **errors(400, 403, 404, 503)},
        summary="Queue an evaluation of a quantize or finetune job's result against its base",
    )
    def post(self, request: Request, job_id) -> Response:
        from .against_base import against_base_params

        body = request.data if isinstance(request.data, dict) else None
        if body is None or set(body) - {"max_examples"}:
            raise ValidationError({"detail": 'expected {} or {"max_examples": N}'})
        try:
            params = against_base_params(_job(job_id), max_examples=body.get("max_examples"))
        except JobParamsError as error:
            raise ValidationError({"detail": str(error)}) from None
        return _submitted("evaluate", params, request.user)


class DatasetPreviewApi(APIView):
    permission_classes = [StaffOnly]

    @extend_schema(responses={200: OpenApiTypes.OBJECT, **errors(400, 403, 404, 409)})
    def get(self, request: Request, job_id) -> Response:
        from .datasets import preview

        job = _job(job_id)
        if job.kind != "dataset" or job.status != "succeeded":
            return Response({"detail": "only a finished dataset job has a preview"}, status=409)
        try:
            page = int(request.query_params.get("page", "1"))
            split = request.query_params.get("split", "train")
            return Response(preview(Path(job.artifact_path), split, page))
        except ValueError as error:
            raise ValidationError({"detail": str(error)}) from None


class UploadApi(APIView):
    permission_classes = [StaffOnly]
    parser_classes = [MultiPartParser]

    @extend_schema(
        request={
            "multipart/form-data": {
                "type": "object",
                "properties": {"file": {"type": "string", "format": "binary"}},
            }
        },
        responses={
            201: OpenApiTypes.OBJECT,
            **errors(403, 415),
            # Twisted (under Daphne) refuses a malformed multipart body itself, with no body.
            400: OpenApiResponse(
                description="No file, a wrong file type or size ({'detail': ...}); a malformed "
                "multipart body gets an empty 400 from the HTTP server before Django sees it"
            ),
        },
        summary="Upload a JSONL or CSV file for a dataset job",
    )
    def post(self, request: Request) -> Response:
        from .uploads import save_upload

        upload = request.FILES.get("file")
        if upload is None:
            raise ValidationError({"detail": "file required (multipart field 'file')"})
        try:
            upload_id = save_upload(upload, upload.name, request.user.pk)
        except JobParamsError as error:
            raise ValidationError({"detail": str(error)}) from None
        return Response(
            {"id": upload_id, "filename": upload.name, "size": upload.size},
            status=status.HTTP_201_CREATED,
        )


def adapter_dict(adapter: Adapter) -> dict:
    return {
        "name": adapter.name,
        "base_model": adapter.base_model,
        "fine_tune_type": adapter.fine_tune_type,
        "job_id": adapter.job_id,
        "path": adapter.path,
        "created_at": adapter.created_at.isoformat(),
    }


class AdapterListApi(APIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT, **errors(403)}, summary="Adapters")
    def get(self, request: Request) -> Response:
        adapters = Adapter.objects.all()
        if base := request.query_params.get("model"):
            adapters = adapters.filter(base_model=base)
        return Response({"results": [adapter_dict(a) for a in adapters]})
