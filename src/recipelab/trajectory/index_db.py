"""The trajectory's SQL index: its table, the URLs it accepts and the engines that open it.

SQLite runs in WAL mode with one writer (``BEGIN IMMEDIATE``: a transaction never fails
half-way on a lock upgrade) and read-only readers; PostgreSQL goes through psycopg 3. The
store (:mod:`recipelab.trajectory.store`) decides what is written when; this module only
says how to reach the database and whether a file holds this version's table.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, Table, create_engine, delete, event, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DatabaseError
from sqlalchemy.pool import Pool, QueuePool, StaticPool
from sqlmodel import Session

from recipelab.errors import RecipelabError
from recipelab.redaction import redact_url
from recipelab.trajectory.record import TrialRecord, TrialRow

TABLE: Table = TrialRow.metadata.tables[str(TrialRow.__tablename__)]
# Long enough to outwait any single write transaction of the campaign (they are tiny), short
# enough that a reader stuck behind a wedged writer reports it rather than hanging.
BUSY_TIMEOUT_MS = 10_000


class StoreError(RecipelabError, RuntimeError):
    """The trajectory cannot be written or read as asked; the message says what to do."""


def replace_rows(session: Session, campaign: str, records: Iterable[TrialRecord]) -> None:
    connection = session.connection()
    TABLE.create(connection, checkfirst=True)
    connection.execute(delete(TABLE).where(TABLE.c.campaign == campaign))
    session.add_all(record.to_row() for record in records)


def has_table(engine: Engine) -> bool:
    with engine.connect() as connection:
        return inspect(connection).has_table(TABLE.name)


def parse_url(db_url: str) -> URL:
    try:
        return make_url(db_url)
    except ArgumentError:
        raise StoreError(
            f"{redact_url(db_url)!r} is not a database URL; give postgresql+psycopg://USER@HOST"
            "[:PORT]/DATABASE, or sqlite:///PATH, or leave --db out for SQLite in the campaign "
            "directory") from None


def server_url(db_url: str | None) -> URL | None:
    """The URL of a PostgreSQL index (psycopg 3 as its driver), None for SQLite."""
    if db_url is None:
        return None
    url = parse_url(db_url)
    backend, _, driver = url.drivername.partition("+")
    if backend == "sqlite":
        return None
    if backend not in ("postgresql", "postgres") or driver not in ("", "psycopg"):
        raise StoreError(
            f"database {redact_url(db_url)!r} is not supported: the trajectory index is SQLite or "
            "PostgreSQL through psycopg 3 (postgresql+psycopg://USER@HOST[:PORT]/DATABASE)")
    return url.set(drivername="postgresql+psycopg")


def sqlite_file(db_url: str) -> Path:
    database = parse_url(db_url).database
    if not database or database == ":memory:":
        raise StoreError(f"{db_url!r} names no SQLite file; give sqlite:///PATH")
    return Path(database)


ADDED_COLUMNS = {
    "budget": "ALTER TABLE trials ADD COLUMN IF NOT EXISTS budget INTEGER",
}
"""The nullable columns records gained after the table was first shipped, each with the one
literal statement that adds it to an older table."""


def add_columns(engine: Engine, columns: set[str]) -> set[str]:
    """Add to an older recipelab's table the :data:`ADDED_COLUMNS` it lacks (a record without
    them reads as one written before they existed); returns the columns the table then has.
    Another difference is left for the caller to refuse."""
    missing = set(TABLE.columns.keys()) - columns
    if not missing <= set(ADDED_COLUMNS):
        return columns
    with engine.begin() as connection:
        for name in sorted(missing):
            connection.exec_driver_sql(ADDED_COLUMNS[name])
    return columns | missing


def index_usable(engine: Engine, path: Path) -> bool:
    """Whether the file is a healthy SQLite database holding this version's table.

    A lock held past the busy timeout is not damage, and setting aside a file another process
    is writing would fork the index, so that is an error rather than ``False``.
    """
    try:
        with engine.connect() as connection:
            if connection.exec_driver_sql("PRAGMA quick_check").scalar() != "ok":
                return False
            inspector = inspect(connection)
            if not inspector.has_table(TABLE.name):
                return False
            columns = {column["name"] for column in inspector.get_columns(TABLE.name)}
            return columns == set(TABLE.columns.keys())
    except DatabaseError as err:
        if "is locked" in str(err.orig):
            raise StoreError(
                f"{path} stayed locked for {BUSY_TIMEOUT_MS / 1000:g} s; is another recipelab "
                "process writing this campaign? Stop it, or wait for it to finish"
            ) from err
        return False


def writer_engine(path: Path) -> Engine:
    def connect() -> sqlite3.Connection:
        return _connect(str(path), "PRAGMA journal_mode = WAL", "PRAGMA synchronous = NORMAL")

    # IMMEDIATE takes the write lock up front, so a transaction never fails half-way on an
    # upgrade; NORMAL is durable enough in WAL because the fsynced JSONL is the commit point.
    return _engine(connect, begin="BEGIN IMMEDIATE", pool=QueuePool)


def reader_engine(path: Path) -> Engine:
    uri = f"{path.resolve().as_uri()}?mode=ro"
    return _engine(lambda: _connect(uri, uri=True), begin="BEGIN", pool=QueuePool)


def memory_engine() -> Engine:
    # One shared connection: every new connection to ":memory:" would be a new, empty database.
    return _engine(lambda: _connect(":memory:"), begin="BEGIN", pool=StaticPool)


def _connect(database: str, *pragmas: str, uri: bool = False) -> sqlite3.Connection:
    """A driver connection in autocommit mode, so SQLAlchemy's explicit BEGIN (see
    :func:`_engine`) covers DDL too: pysqlite's own transactions would not."""
    connection = sqlite3.connect(database, uri=uri, isolation_level=None, check_same_thread=False)
    try:
        for pragma in (f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}", *pragmas):
            connection.execute(pragma)
    except sqlite3.Error:
        connection.close()
        raise
    return connection


def _engine(connect: Callable[[], sqlite3.Connection], *, begin: str, pool: type[Pool]) -> Engine:
    engine = create_engine("sqlite://", creator=connect, poolclass=pool)

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        connection.exec_driver_sql(begin)

    return engine
