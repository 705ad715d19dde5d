"""/api/side-by-side/votes: which of 2-4 replies to one prompt was better."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access.error_responses import errors

from .chat_settings import ChatInputError
from .side_by_side import record_vote, vote_dict


class SideBySideVoteApi(APIView):
    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={201: OpenApiTypes.OBJECT, **errors(400, 403)},
        summary="Keep a side-by-side vote with its conversations",
    )
    def post(self, request: Request) -> Response:
        body = request.data
        if not isinstance(body, dict) or set(body) != {"conversations", "winner"}:
            raise ValidationError({"detail": 'expected {"conversations": [ids], "winner": i}'})
        try:
            vote = record_vote(request.user, body["conversations"], body["winner"])
        except ChatInputError as error:
            raise ValidationError({"detail": str(error)}) from None
        return Response(vote_dict(vote), status=status.HTTP_201_CREATED)
