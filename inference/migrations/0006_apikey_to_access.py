"""ApiKey moves to the access app: gone from inference's state, its table untouched.

access's 0001_initial takes the model over, on the same table (inference_apikey).
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("inference", "0005_response_owner"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="ApiKey")],
            database_operations=[],
        ),
    ]
