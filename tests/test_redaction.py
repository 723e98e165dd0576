"""The one redactor, against every secret shape recipelab has met: database, LLM and MLflow
URLs with a password, a lone token as userinfo, a password SQLAlchemy already masked, API
keys from the environment, and the Basic authorization a client makes of URL credentials."""

from __future__ import annotations

import base64

import pytest

from recipelab.redaction import REDACTED, redact, redact_text, redact_url, url_secrets

PASSWORD = "s3cr3t-pa55word"  # noqa: S105 - a made-up password the tests hunt for


@pytest.mark.parametrize(("url", "shown"), [
    (f"postgresql+psycopg://ann:{PASSWORD}@db.lan:5432/labs",
     "postgresql+psycopg://ann:[redacted]@db.lan:5432/labs"),
    (f"http://user:{PASSWORD}@spark:8000/v1", "http://user:[redacted]@spark:8000/v1"),
    (f"http://u:{PASSWORD}@[::1]:8000/v1", "http://u:[redacted]@[::1]:8000/v1"),
    ("https://tok-9f8e7d6c@spark/v1", "https://[redacted]@spark/v1"),  # a lone token
    ("http://TOKEN@mlflow.lan:5000", "http://[redacted]@mlflow.lan:5000"),
    ("postgresql://ann:***@db.lan/labs", "postgresql://ann:***@db.lan/labs"),  # masked already
    ("http://localhost:8000/v1", "http://localhost:8000/v1"),
    ("sqlite:////tmp/mlflow.db", "sqlite:////tmp/mlflow.db"),
    ("not a url@x", "not a url@x"),
])
def test_a_urls_credentials_are_replaced_and_nothing_else(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_urls_inside_free_text_and_named_secrets_are_redacted_there_too() -> None:
    text = (f"could not reach http://ann:{PASSWORD}@host/v1 (also tried "
            f"https://TOKEN123@other); key sk-live-abcdef in the reply, about it")
    shown = redact_text(text, ["sk-live-abcdef", "ab"])  # too short to redact by value
    assert PASSWORD not in shown and "TOKEN123" not in shown and "sk-live-abcdef" not in shown
    assert shown.count(REDACTED) == 3 and "ab" in shown


def test_events_are_redacted_through_mappings_and_lists() -> None:
    event = {"db": f"postgresql://ann:{PASSWORD}@db/x", "n": 3,
             "nested": [{"error": "key sk-0123456789 refused"}, "plain"]}
    assert redact(event, ["sk-0123456789"]) == {
        "db": f"postgresql://ann:{REDACTED}@db/x", "n": 3,
        "nested": [{"error": f"key {REDACTED} refused"}, "plain"]}


def test_a_urls_secrets_include_the_decoded_password_and_its_basic_authorization() -> None:
    secrets = url_secrets("http://user:p%40ss-word@host/v1")
    basic = base64.b64encode(b"user:p@ss-word").decode()
    assert {"p%40ss-word", "p@ss-word", basic} <= set(secrets)
    assert url_secrets("http://host/v1") == []
