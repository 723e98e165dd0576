"""The values a user typed, checked before anything is written: no torch, no I/O, so a typo
never creates a campaign directory or waits for a trial."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from recipelab import environment
from recipelab.agent.setup.proposer_choice import LLM_ENV
from recipelab.agent.setup.settings_components import until_problem
from recipelab.errors import RecipelabError
from recipelab.targets import PROXY_PRESETS, TARGETS, get_target


class InputError(RecipelabError, ValueError):
    """A value the user typed cannot be used; the message is one line naming the fix."""


def llm_url_problem(url: str, origin: str) -> str | None:
    """Why ``url`` cannot be an OpenAI-compatible endpoint, or None when it can."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or " " in url.strip():
        return (f"{origin} {url!r} is not an http(s) URL: give the scheme and host, e.g. "
                "http://localhost:8000/v1")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return f"{origin} {url!r} has an invalid port: e.g. http://localhost:8000/v1"
    return None


def check_input(*, preset: str | None, target: str | None, until: str | None,
                llm_base_url: str | None) -> None:
    """Raise :class:`InputError` for the first value that cannot be used, before anything is
    written (no campaign directory is created for a typo)."""
    if preset is not None and preset not in PROXY_PRESETS:
        raise InputError(f"unknown --preset {preset!r}: choose one of {', '.join(PROXY_PRESETS)}")
    if target is not None and target not in TARGETS:
        if not target.endswith(".json") and not Path(target).exists():
            raise InputError(f"unknown --target {target!r}: choose one of {', '.join(TARGETS)}, "
                             "or give the path of a target file (config.json)")
        try:
            get_target(target)  # a target file: it must exist and describe a target
        except ValueError as error:
            raise InputError(f"--target: {error}") from None
    if until is not None and (problem := until_problem(until)):
        raise InputError(problem)
    for url, origin in ((llm_base_url, "--llm-base-url"), (environment.read(LLM_ENV), LLM_ENV)):
        if url and url.strip() and (problem := llm_url_problem(url, origin)):
            raise InputError(problem)
