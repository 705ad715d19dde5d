"""ApiKey, taken over from inference: state only, on the table inference made.

A fresh database gets the table from inference's 0003 and an existing one keeps its
rows; either way inference's 0006 has dropped the model from its state first. The
content type is renamed rather than made anew, so permissions granted on keys and the
admin's history of them stay attached.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def content_type_to(app_label: str, other: str):
    def rename(apps, schema_editor) -> None:
        content_types = apps.get_model("contenttypes", "ContentType")
        if content_types.objects.filter(app_label=app_label, model="apikey").exists():
            return
        content_types.objects.filter(app_label=other, model="apikey").update(app_label=app_label)

    return rename


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("inference", "0006_apikey_to_access"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ApiKey",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("label", models.CharField(blank=True, max_length=100)),
                        ("prefix", models.CharField(editable=False, max_length=16)),
                        ("digest", models.CharField(editable=False, max_length=64, unique=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "last_used_at",
                            models.DateTimeField(blank=True, editable=False, null=True),
                        ),
                        ("revoked_at", models.DateTimeField(blank=True, editable=False, null=True)),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="api_keys",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "API key",
                        "db_table": "inference_apikey",
                        "ordering": ["-created_at"],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(
            content_type_to("access", "inference"), content_type_to("inference", "access")
        ),
    ]
