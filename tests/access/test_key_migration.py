"""ApiKey's move from inference to access: a key made before it still works after it."""

from __future__ import annotations

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from access.api_keys import check_key, key_digest
from access.models import ApiKey

BEFORE_THE_MOVE = [("inference", "0005_response_owner")]
# The models this test writes, as they stand (the node above alone gives their first state).
ALSO_USED = [
    ("contenttypes", "0002_remove_content_type_name"),
    ("auth", "0012_alter_user_first_name_max_length"),
]
RAW = "mlx-made-before-the-move-0123456789abcdefghijklmnopq"


@pytest.mark.django_db(transaction=True)
def test_a_key_and_its_content_type_survive_the_move():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_THE_MOVE)
    try:
        old = executor.loader.project_state(BEFORE_THE_MOVE + ALSO_USED).apps
        content_type, _ = old.get_model("contenttypes", "ContentType").objects.get_or_create(
            app_label="inference", model="apikey"
        )
        user = old.get_model("auth", "User").objects.create(username="early")
        old.get_model("inference", "ApiKey").objects.create(
            user_id=user.pk, label="early", prefix=RAW[:12], digest=key_digest(RAW)
        )
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())

    check = check_key(RAW)
    assert check.ok and check.key.label == "early" and check.key.user.username == "early"
    assert ApiKey._meta.db_table == "inference_apikey"
    ContentType.objects.clear_cache()
    # Renamed, not made anew: permissions and admin history on keys stay attached.
    assert ContentType.objects.get_for_model(ApiKey).pk == content_type.pk
    assert not ContentType.objects.filter(app_label="inference", model="apikey").exists()
