"""What a PostgreSQL index adds to the store: one table shared by many campaigns.

The conformance suite in ``test_store.py`` runs on PostgreSQL as well; these are the
specifications only a shared database server has.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from recipelab.redaction import REDACTED, redact_url
from recipelab.trajectory import StoreError, TrajectoryStore, TrialRecord

PASSWORD = "s3cret-pw"  # noqa: S105 - a made-up password, to see that it never leaks


def make(campaign: str, trial_id: str, **fields: object) -> TrialRecord:
    return TrialRecord.model_validate({"campaign": campaign, "trial_id": trial_id,
                                       "status": "complete", **fields})


def test_campaigns_share_one_table_and_each_store_sees_only_its_own(
        tmp_path: Path, postgres_database: str) -> None:
    with TrajectoryStore(tmp_path / "a", "a", db_url=postgres_database) as a, \
            TrajectoryStore(tmp_path / "b", "b", db_url=postgres_database) as b:
        a.reconcile()
        b.reconcile()
        a.append(make("a", "p0000", val_bpb=1.5))
        b.append(make("b", "p0000", val_bpb=2.5))  # the same trial_id in another campaign
        b.append(make("b", "p0001"))
        assert [(r.campaign, r.val_bpb) for r in a.records()] == [("a", 1.5)]
        assert [r.trial_id for r in b.records()] == ["p0000", "p0001"]
        assert a.rebuild() == 1
        assert a.check() == [] and b.check() == []
        assert [r.trial_id for r in b.records()] == ["p0000", "p0001"], "rebuild touched b"
    engine = create_engine(postgres_database)
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT campaign, trial_id FROM trials ORDER BY 1, 2"))
        assert [tuple(row) for row in rows] == [("a", "p0000"), ("b", "p0000"), ("b", "p0001")]
    engine.dispose()


def test_a_campaign_index_lost_from_the_server_is_refilled_from_the_jsonl(
        tmp_path: Path, postgres_database: str) -> None:
    with TrajectoryStore(tmp_path, "a", db_url=postgres_database) as store:
        store.append(make("a", "p0000"))
    engine = create_engine(postgres_database)
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM trials"))
    engine.dispose()
    with TrajectoryStore(tmp_path, "a", db_url=postgres_database) as store:
        assert store.reconcile().inserted == ["p0000"]
        assert store.records() == store.jsonl_records()


def test_a_table_of_another_schema_is_refused_and_left_alone(
        tmp_path: Path, postgres_database: str) -> None:
    engine = create_engine(postgres_database)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE trials (campaign TEXT, trial_id TEXT, old TEXT)"))
        connection.execute(text("INSERT INTO trials VALUES ('other', 't1', 'kept')"))
    with pytest.raises(StoreError, match="other campaigns' rows"):
        TrajectoryStore(tmp_path, "a", db_url=postgres_database)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT old FROM trials")).scalar() == "kept"
    engine.dispose()


def test_a_table_of_an_older_recipelab_gains_the_new_nullable_column_and_keeps_its_rows(
        tmp_path: Path, postgres_database: str) -> None:
    """A table from before records carried their rung's ``budget``: the column is added, and
    the rows already there read as records without one."""
    with TrajectoryStore(tmp_path / "old", "old", db_url=postgres_database) as store:
        store.append(make("old", "p0000", val_bpb=1.5))
    engine = create_engine(postgres_database)
    with engine.begin() as connection:
        connection.execute(text("ALTER TABLE trials DROP COLUMN budget"))
    engine.dispose()
    with TrajectoryStore(tmp_path / "new", "new", db_url=postgres_database) as store:
        store.append(make("new", "p0000", budget=60))
        assert [r.budget for r in store.records()] == [60]
    with TrajectoryStore(tmp_path / "old", "old", db_url=postgres_database) as store:
        assert [(r.trial_id, r.budget) for r in store.records()] == [("p0000", None)]


def test_an_unreachable_server_is_named_without_its_password(
        tmp_path: Path, postgres_server: str) -> None:
    url = make_url(postgres_server).set(password=PASSWORD, port=1)  # nothing listens on port 1
    with pytest.raises(StoreError) as caught:
        TrajectoryStore(tmp_path, "a", db_url=url.render_as_string(hide_password=False))
    message = str(caught.value)
    assert PASSWORD not in message and REDACTED in message and "server is up" in message


@pytest.mark.parametrize(("url", "says"), [
    ("not a url", "is not a database URL"),
    ("mysql://u@localhost/db", "SQLite or PostgreSQL"),
    ("postgresql+psycopg2://u@localhost/db", "psycopg 3"),
    ("sqlite://", "names no SQLite file"),
])
def test_a_database_url_that_cannot_be_used_says_what_to_give(
        tmp_path: Path, url: str, says: str) -> None:
    with pytest.raises(StoreError, match=says):
        TrajectoryStore(tmp_path, "a", db_url=url)
    assert not (tmp_path / TrajectoryStore.JSONL).exists()



def test_a_campaign_indexed_in_postgresql_is_read_back_by_status(
        tmp_path: Path, postgres_database: str, trainer_env: dict[str, str]) -> None:
    """End to end through the command line; the server trusts loopback, so the password in
    the URL is not needed to connect and shows whether it leaks anywhere."""
    url = make_url(postgres_database).set(password=PASSWORD).render_as_string(hide_password=False)
    env = {**trainer_env, "COLUMNS": "200"}
    run = subprocess.run(
        [sys.executable, "-m", "recipelab", "run", "--name", "pg", "--preset", "tiny",
         "--iterations", "2", "--promote", "0", "--proposer", "classical", "--db", url],
        cwd=tmp_path, capture_output=True, text=True, timeout=280, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    status = subprocess.run([sys.executable, "-m", "recipelab", "status", "pg"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, env=env)
    assert status.returncode == 0, status.stderr
    assert "p0000" in status.stdout
    directory = tmp_path / "campaigns" / "pg"
    assert not (directory / TrajectoryStore.SQLITE).exists()
    events = (directory / "events.jsonl").read_text()
    assert PASSWORD not in events + run.stdout + run.stderr + status.stdout
    started = [json.loads(line) for line in events.splitlines() if '"campaign_started"' in line]
    assert started[0]["db"] == redact_url(url)
    with TrajectoryStore(directory, "pg", readonly=True, db_url=url) as store:
        assert store.check() == []
        assert len(store.records()) == len(store.jsonl_records()) >= 2
