"""A database of its own for every lab a test starts.

By default a SQLite file in the lab's home. With DATABASE_URL set (the suite on
PostgreSQL: `make test-postgres`), a fresh database on that server for each lab,
dropped when the session ends; pytest-django makes its own `test_` database there.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from urllib.parse import urlparse

SUITE_URL = os.environ.get("DATABASE_URL", "").strip()
_created: list[str] = []


def _url(name: str) -> str:
    return urlparse(SUITE_URL)._replace(path=f"/{name}").geturl()


def _admin():
    import psycopg

    return psycopg.connect(_url("postgres"), autocommit=True, connect_timeout=5)


def database_env(home: Path) -> dict[str, str]:
    """The environment that gives a lab in `home` a database of its own."""
    if not SUITE_URL:
        return {"MLXLAB_DB_PATH": str(home / "db.sqlite3")}
    name = f"mlxlab_{uuid.uuid4().hex[:12]}"
    with _admin() as db:
        db.execute(f'CREATE DATABASE "{name}"')
    _created.append(name)
    return {"DATABASE_URL": _url(name)}


def drop_created() -> None:
    if not _created:
        return
    with _admin() as db:
        while _created:
            db.execute(f'DROP DATABASE IF EXISTS "{_created.pop()}" WITH (FORCE)')


def query_one(env: dict, sql: str) -> tuple:
    """One row of a lab's own database, read directly (not through Django)."""
    if "DATABASE_URL" in env and env["DATABASE_URL"]:
        import psycopg

        with psycopg.connect(env["DATABASE_URL"]) as db:
            return db.execute(sql).fetchone()
    import sqlite3

    with sqlite3.connect(env["MLXLAB_DB_PATH"]) as db:
        return db.execute(sql).fetchone()
