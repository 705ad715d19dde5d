"""OpenAI-shaped errors: every failure a client can cause becomes one of these."""

from __future__ import annotations

from django.http import JsonResponse


class ApiError(Exception):
    """A client-facing error with its HTTP status and OpenAI error fields."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code

    def as_dict(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JsonResponse:
        return JsonResponse(self.as_dict(), status=self.status)


def model_not_found(name: str) -> ApiError:
    return ApiError(
        f"The model '{name}' does not exist", status=404, param="model", code="model_not_found"
    )
