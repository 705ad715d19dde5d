"""The Hugging Face Hub client, pointed at HF_ENDPOINT (the real Hub unless told otherwise)."""

from __future__ import annotations

from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError

from labsettings import lab_settings


class HubError(RuntimeError):
    """The Hub refused or could not be reached; the text is the Hub's own message."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def hub_api(token: str) -> HfApi:
    return HfApi(endpoint=lab_settings.hf_endpoint, token=token)


def repo_url(repo_id: str, repo_type: str) -> str:
    prefix = "datasets/" if repo_type == "dataset" else ""
    return f"{lab_settings.hf_endpoint.rstrip('/')}/{prefix}{repo_id}"


def hub_error(error: Exception) -> HubError:
    """The Hub's message and status from whatever the client raised (never the token)."""
    if isinstance(error, HfHubHTTPError):
        response = getattr(error, "response", None)
        status = getattr(response, "status_code", None)
        server = getattr(error, "server_message", None) or str(error).splitlines()[0]
        return HubError(f"the Hub answered {status}: {server}", status)
    return HubError(f"the Hub could not be reached: {type(error).__name__}: {error}")


def whoami(token: str) -> str:
    """The token's user name; HubError when the Hub rejects it or cannot be reached."""
    try:
        return hub_api(token).whoami()["name"]
    except Exception as error:
        raise hub_error(error) from None
