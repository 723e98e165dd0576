"""The store's specifications run on every index backend: SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from tests.postgres import postgres_database, postgres_server

__all__ = ["db_url", "postgres_database", "postgres_server"]


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest) -> str | None:
    """None for the default SQLite index in the campaign directory, else a fresh PostgreSQL
    database's URL."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("postgres_database")
    return url
