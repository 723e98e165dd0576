"""The SQL index's URLs and engines: which databases it accepts, with an error that says what
to give, and whether a SQLite file holds this version's table (a file that does not is set
aside and rebuilt by the store)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from recipelab.trajectory.index_db import (
    TABLE,
    StoreError,
    index_usable,
    reader_engine,
    server_url,
    sqlite_file,
    writer_engine,
)


def test_no_url_and_a_sqlite_url_mean_sqlite() -> None:
    assert server_url(None) is None
    assert server_url("sqlite:///tmp/index.sqlite") is None


@pytest.mark.parametrize("url", ["postgresql://me@db:5432/runs", "postgres://me@db/runs",
                                 "postgresql+psycopg://me@db/runs"])
def test_a_postgresql_url_is_reached_through_psycopg_3(url: str) -> None:
    found = server_url(url)
    assert found is not None and found.drivername == "postgresql+psycopg"
    assert found.host == "db" and found.database == "runs"


@pytest.mark.parametrize(("url", "words"), [
    ("mysql://me@db/runs", "SQLite or PostgreSQL through psycopg 3"),
    ("postgresql+asyncpg://me@db/runs", "psycopg 3"),
    ("not a url", "postgresql+psycopg://USER@HOST"),
])
def test_another_database_is_refused_with_what_to_give(url: str, words: str) -> None:
    with pytest.raises(StoreError, match=re.escape(words)):
        server_url(url)


def test_a_password_in_a_refused_url_is_not_repeated() -> None:
    with pytest.raises(StoreError) as caught:
        server_url("mysql://me:hunter22@db/runs")
    assert "hunter22" not in str(caught.value)


def test_a_sqlite_url_must_name_a_file() -> None:
    assert sqlite_file("sqlite:////data/index.sqlite") == Path("/data/index.sqlite")
    with pytest.raises(StoreError, match="sqlite:///PATH"):
        sqlite_file("sqlite:///:memory:")


def test_a_file_with_this_versions_table_is_usable_and_readable(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    TABLE.create(writer_engine(path))
    assert index_usable(writer_engine(path), path)
    with reader_engine(path).connect() as connection:
        assert connection.exec_driver_sql("SELECT count(*) FROM trials").scalar() == 0


def test_a_damaged_file_or_another_schema_is_not_usable(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database" * 100)
    assert not index_usable(writer_engine(garbage), garbage)
    older = tmp_path / "older.sqlite"
    with sqlite3.connect(older) as db:
        db.execute("CREATE TABLE trials (campaign TEXT, trial_id TEXT)")
    assert not index_usable(writer_engine(older), older)
    empty = tmp_path / "empty.sqlite"
    assert not index_usable(writer_engine(empty), empty)
