"""Existing conversations become trees of one branch: each message follows the one before
it (id order, as they were read), and each is the only, shown, version of its turn. The
conversations of a side-by-side vote form one run, so the sidebar groups them.

Apart from 0003 (its schema) so that on PostgreSQL the updates run in a transaction of
their own, after the new foreign key exists.
"""

from django.db import migrations

BATCH = 1000


def link_turns(apps, schema_editor) -> None:
    Message = apps.get_model("lab", "Message")
    batch, conversation, previous = [], None, None
    rows = Message.objects.order_by("conversation_id", "id").only("id", "conversation_id")
    for message in rows.iterator(chunk_size=BATCH):
        if message.conversation_id != conversation:
            conversation, previous = message.conversation_id, None
        if previous is not None:
            message.parent_id = previous
            batch.append(message)
        previous = message.id
        if len(batch) >= BATCH:
            Message.objects.bulk_update(batch, ["parent"])
            batch = []
    Message.objects.bulk_update(batch, ["parent"])


def group_voted_runs(apps, schema_editor) -> None:
    Conversation = apps.get_model("lab", "Conversation")
    SideBySide = apps.get_model("lab", "SideBySide")
    for vote in SideBySide.objects.order_by("id").iterator():
        Conversation.objects.filter(id__in=vote.conversation_ids, side_by_side_run="").update(
            side_by_side_run=f"vote-{vote.id}"
        )


class Migration(migrations.Migration):
    dependencies = [("lab", "0003_reply_versions")]

    # Back to 0002 the parent links go with their column: nothing to undo here.
    operations = [
        migrations.RunPython(link_turns, migrations.RunPython.noop),
        migrations.RunPython(group_voted_runs, migrations.RunPython.noop),
    ]
