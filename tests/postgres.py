"""A real PostgreSQL server on loopback for the tests, and a fresh database per test.

``make test`` starts the server with ``scripts/start-test-postgres`` before pytest; run on
their own, the tests start it themselves and stop it again at the end of the session.
``RECIPELAB_TEST_POSTGRES_URL`` names a server of your own instead (one where the user may
create databases). Where PostgreSQL is neither installed nor installable (no root), the
PostgreSQL tests skip, saying how to enable them; with ``CI`` set they fail instead, since
CI must run them.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.llm_server import skip_or_fail

ROOT = Path(__file__).resolve().parent.parent
START = ROOT / "scripts" / "start-test-postgres"
STOP = ROOT / "scripts" / "stop-test-postgres"
URL_FILE = ROOT / ".cache" / "test-postgres" / "url"
NOT_INSTALLED = 3  # start-test-postgres's exit status when no PostgreSQL can be had
URL_ENV = "RECIPELAB_TEST_POSTGRES_URL"
ENABLE_HINT = (f"as root, 'make test' installs it; or set {URL_ENV} to "
               "postgresql+psycopg://USER@HOST:PORT/postgres, a server where USER may create "
               "databases")


def libpq(url: str) -> str:
    """The SQLAlchemy URL as a libpq connection string for psycopg."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _answers(url: str) -> bool:
    try:
        with psycopg.connect(libpq(url), connect_timeout=5):
            return True
    except psycopg.OperationalError:
        return False


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of the test server's maintenance database."""
    given = os.environ.get(URL_ENV, "").strip()
    if given:
        assert _answers(given), f"{URL_ENV} names a PostgreSQL server that does not answer"
        yield given
        return
    if URL_FILE.exists() and _answers(url := URL_FILE.read_text().strip()):
        yield url  # started by `make test`, which stops it
        return
    done = subprocess.run(["bash", str(START)], capture_output=True, text=True, timeout=600)
    if done.returncode == NOT_INSTALLED:
        skip_or_fail(f"PostgreSQL store tests skipped: {done.stderr.strip()}", hint=ENABLE_HINT)
    assert done.returncode == 0, f"start-test-postgres failed:\n{done.stderr}"
    try:
        yield done.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run(["bash", str(STOP)], capture_output=True, timeout=120, check=False)


@pytest.fixture
def postgres_database(postgres_server: str) -> Iterator[str]:
    """A new, empty database on the test server for one test; dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(libpq(postgres_server), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = make_url(postgres_server).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with psycopg.connect(libpq(postgres_server), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
