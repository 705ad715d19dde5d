"""DELETE /api/models/<name> in-process: what is refused, and which files go with a model."""

from __future__ import annotations

import shutil

import pytest
from django.test import Client

from inference.model_registry import model_register
from inference.models import LanguageModel
from jobs.models import Job


@pytest.fixture
def staff(db, django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_user("root", is_staff=True))
    return client


@pytest.fixture
def models_dir(settings, tmp_path):
    settings.MLXLAB = settings.MLXLAB.replace(models_dir=tmp_path / "models")
    return tmp_path / "models"


def copy_model(source, folder):
    shutil.copytree(source, folder)
    return folder


def test_a_model_an_unfinished_job_uses_stays_until_the_job_ends(staff, models_dir, model_folder):
    folder = copy_model(model_folder, models_dir / "smol-copy")
    model_register(name="smol-copy", path=folder)
    job = Job.objects.create(kind="quantize", status="running", params={"model": "smol-copy"})
    refused = staff.delete("/api/models/smol-copy")
    assert refused.status_code == 409
    assert refused.json()["detail"] == f"'smol-copy' is used by a running quantize job ({job.id})"
    assert folder.is_dir() and LanguageModel.objects.filter(name="smol-copy").exists()
    Job.objects.filter(id=job.id).update(status="succeeded")
    answer = staff.delete("/api/models/smol-copy")
    assert answer.status_code == 200, answer.content
    assert answer.json()["files_removed"] is True and answer.json()["freed_bytes"] > 90_000_000
    assert not folder.exists() and not LanguageModel.objects.filter(name="smol-copy").exists()


def test_files_outside_the_models_directory_are_never_removed(
    staff, models_dir, model_folder, tmp_path
):
    folder = copy_model(model_folder, tmp_path / "operators" / "smol")
    model_register(name="elsewhere", path=folder)
    answer = staff.delete("/api/models/elsewhere")
    assert answer.status_code == 200
    assert answer.json() == {
        "name": "elsewhere", "deleted": True, "freed_bytes": 0, "files_removed": False
    }  # fmt: skip
    assert (folder / "model.safetensors").is_file()


def test_only_staff_delete(db, django_user_model, models_dir, model_folder):
    model_register(name="kept", path=model_folder)
    client = Client()
    client.force_login(django_user_model.objects.create_user("plain"))
    assert client.delete("/api/models/kept").status_code == 403
    assert LanguageModel.objects.filter(name="kept").exists()
