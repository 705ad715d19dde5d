import asyncio
import secrets

import httpx
import openai
import pytest

from tests.conftest import DEFAULT_MODEL


@pytest.fixture(scope="session")
def client(lab_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{lab_server.url}/v1", api_key="unused", max_retries=0)


@pytest.fixture
def run_async(lab_server):
    """Run `scenario(client)` on a fresh event loop with its own AsyncOpenAI client."""

    def run(scenario):
        async def main():
            async with openai.AsyncOpenAI(
                base_url=f"{lab_server.url}/v1", api_key="unused", max_retries=0
            ) as client:
                return await scenario(client)

        return asyncio.run(main())

    return run


@pytest.fixture(scope="session")
def http(lab_server) -> httpx.Client:
    with httpx.Client(base_url=lab_server.url, timeout=120) as session:
        yield session


@pytest.fixture(scope="session")
def staff_http(lab_server) -> httpx.Client:
    """/stats, /engine and /health's detail, read as a staff user."""
    with lab_server.staff_client(timeout=120) as session:
        yield session


@pytest.fixture(scope="session")
def model() -> str:
    return DEFAULT_MODEL


CSRF = secrets.token_hex(16)  # 32 characters: Django takes an unmasked secret as the token


@pytest.fixture
def staff(lab_server):
    """A staff session that may change things (POST, DELETE): its CSRF token set."""
    with lab_server.staff_client(timeout=120) as client:
        client.cookies.set("csrftoken", CSRF)
        client.headers["X-CSRFToken"] = CSRF
        yield client
