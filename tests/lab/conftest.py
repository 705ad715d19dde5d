"""The lab's Django side in-process: the registered models and a user."""

from __future__ import annotations

import pytest

from inference.model_registry import model_register
from tests.conftest import DEFAULT_MODEL, THINKING_MODEL, thinking_model_folder


@pytest.fixture
def registered_models(db, model_folder, tmp_path):
    """The default model and the fixture model whose template opens a <think> block."""
    model_register(name=DEFAULT_MODEL, path=model_folder)
    model_register(name=THINKING_MODEL, path=thinking_model_folder(model_folder, tmp_path))
    return DEFAULT_MODEL


@pytest.fixture
def alice(db, django_user_model):
    return django_user_model.objects.create_user("alice", password="alice-password")
