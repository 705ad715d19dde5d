import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    """A message's images become its attachments, images or audio: the same rows, renamed,
    each of kind "image"."""

    dependencies = [
        ("lab", "0005_message_images"),
    ]

    operations = [
        migrations.RenameModel(old_name="MessageImage", new_name="MessageAttachment"),
        migrations.AlterField(
            model_name="messageattachment",
            name="message",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="attachments",
                to="lab.message",
            ),
        ),
        migrations.AddField(
            model_name="messageattachment",
            name="kind",
            field=models.CharField(
                choices=[("image", "image"), ("audio", "audio")], default="image", max_length=8
            ),
            preserve_default=False,
        ),
        migrations.RemoveConstraint(
            model_name="messageattachment",
            name="unique_image_position",
        ),
        migrations.AddConstraint(
            model_name="messageattachment",
            constraint=models.UniqueConstraint(
                fields=("message", "position"), name="unique_attachment_position"
            ),
        ),
    ]
