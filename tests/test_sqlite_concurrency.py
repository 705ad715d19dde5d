"""The embedded SQLite database shared by Daphne, Celery workers and model workers.

Each test opens connections the way the lab does (the settings' own OPTIONS) on a
file of its own, since pytest-django's test database is in memory.
"""

from __future__ import annotations

import threading

import pytest
from django.conf import settings
from django.db import connections, transaction
from django.db.utils import ConnectionHandler

pytestmark = pytest.mark.skipif(
    settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3",
    reason="the suite runs on PostgreSQL (DATABASE_URL set)",
)


@pytest.fixture
def lab_connections(tmp_path, monkeypatch, django_db_blocker):
    """Aliases of one database file, opened as the lab's processes open theirs."""
    config = {**settings.DATABASES["default"], "NAME": str(tmp_path / "db.sqlite3")}
    filled = ConnectionHandler().configure_settings({"default": config})["default"]
    for alias in ("lab_a", "lab_b"):
        monkeypatch.setitem(connections.settings, alias, dict(filled))
    with django_db_blocker.unblock():
        with connections["lab_a"].cursor() as cursor:
            cursor.execute("CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER)")
            cursor.execute("INSERT INTO counter VALUES (1, 0)")
        yield connections
        connections["lab_a"].close()
        del connections["lab_a"]


def _value(connection) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT n FROM counter WHERE id = 1")
        return cursor.fetchone()[0]


def test_the_database_file_is_in_write_ahead_log_mode(lab_connections):
    with lab_connections["lab_a"].cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"


def test_a_read_then_write_transaction_waits_for_a_concurrent_writer_instead_of_failing(
    lab_connections,
):
    """A turn read, another process writes, the turn writes: both land.

    With SQLite's default deferred transactions the turn's write fails at once
    ("database is locked"), whatever the busy timeout, because its snapshot is stale.
    """
    a = lab_connections["lab_a"]
    read_done, other_wrote = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def other_process() -> None:
        b = lab_connections["lab_b"]  # Django's connections belong to one thread each
        try:
            read_done.wait(5)
            with b.cursor() as cursor:
                cursor.execute("UPDATE counter SET n = n + 10 WHERE id = 1")
            other_wrote.set()
        except BaseException as error:  # noqa: BLE001 - reported by the assert below
            errors.append(error)
        finally:
            b.close()
            del lab_connections["lab_b"]

    writer = threading.Thread(target=other_process)
    writer.start()
    with transaction.atomic(using="lab_a"):
        seen = _value(a)
        read_done.set()
        # Holding the write lock since BEGIN, the other write cannot land in between.
        assert not other_wrote.wait(0.5)
        with a.cursor() as cursor:
            cursor.execute("UPDATE counter SET n = %s WHERE id = 1", [seen + 1])
    writer.join(25)
    assert errors == []
    assert other_wrote.is_set()
    assert _value(a) == 11
