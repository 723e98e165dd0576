"""Event redaction: secrets never reach a log line."""

from __future__ import annotations

from recipelab.redaction import REDACTED, redact


def test_a_database_url_keeps_its_user_and_host_but_not_its_password() -> None:
    event = {"db": "postgresql+psycopg://ann:hunter22@db.lan:5432/labs", "n": 3,
             "nested": ["sqlite:///x.db", "postgresql://ann:***@db.lan/labs"]}
    assert redact(event, []) == {
        "db": f"postgresql+psycopg://ann:{REDACTED}@db.lan:5432/labs", "n": 3,
        "nested": ["sqlite:///x.db", "postgresql://ann:***@db.lan/labs"]}
