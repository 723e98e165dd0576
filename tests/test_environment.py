"""The environment variables recipelab reads (:mod:`recipelab.environment`): an unset or
blank one is absent, and every secret that is set is known, to be scrubbed from logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipelab import environment


def test_a_blank_variable_is_absent_and_a_set_one_is_stripped() -> None:
    assert environment.read("X", {"X": "  "}) is None
    assert environment.read("X", {}) is None
    assert environment.read("X", {"X": " http://localhost:8000/v1 \n"}) == "http://localhost:8000/v1"


def test_the_cache_is_the_variables_else_the_users_own(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(environment.CACHE, raising=False)
    assert environment.cache_dir() == Path("~/.cache/recipelab").expanduser()
    monkeypatch.setenv(environment.CACHE, str(tmp_path))
    assert environment.cache_dir() == tmp_path


def test_secrets_are_the_set_ones_long_enough_to_scrub(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in environment.SECRETS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-0123456789")
    monkeypatch.setenv("PGPASSWORD", "ab")  # too short: it would match inside ordinary words
    assert environment.secrets() == ["sk-0123456789"]
