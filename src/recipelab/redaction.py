"""The one redactor: secrets never reach a log, an event, a record or an error message.

Every secret shape recipelab knows of:

- a URL's password, ``scheme://user:PASSWORD@host`` (a database, an LLM endpoint, an MLflow
  server), shown as ``user:[redacted]@``; one SQLAlchemy already masked as ``***`` stays;
- a lone userinfo token, ``scheme://TOKEN@host`` (a common way to pass an API token),
  redacted whole;
- the API keys and other secrets named in the environment, wherever they appear, as written,
  percent-decoded, or as the HTTP Basic authorization a client makes of URL credentials
  (:func:`url_secrets`).

It imports nothing from recipelab, so every layer can use it.
"""

from __future__ import annotations

import base64
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["MIN_SECRET_CHARS", "REDACTED", "redact", "redact_text", "redact_url", "url_secrets"]

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 4
"""Shorter strings are not redacted by value: a 1-3 character "secret" would shred the text."""

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")
_ALREADY_MASKED = "***"


def _userinfo(match: re.Match[str]) -> str:
    user, colon, password = match.group("userinfo").partition(":")
    if colon and password == _ALREADY_MASKED:
        return match.group(0)
    shown = f"{user}:{REDACTED}" if colon else REDACTED
    return f"{match.group('scheme')}{shown}@"


def redact_url(url: str) -> str:
    """``url`` fit for a log, an error or a record: its credentials replaced.

    ``http://user:secret@host/v1`` becomes ``http://user:[redacted]@host/v1``;
    ``http://TOKEN@host`` becomes ``http://[redacted]@host``.
    """
    return redact_text(url)


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with the credentials of every URL in it, and every one of ``secrets``
    (at least :data:`MIN_SECRET_CHARS` long), replaced."""
    text = _USERINFO.sub(_userinfo, text)
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= MIN_SECRET_CHARS:
            text = text.replace(secret, REDACTED)
    return text


def redact(value: Any, secrets: Iterable[str] = ()) -> Any:
    """:func:`redact_text` over every string in ``value``, through mappings and sequences."""
    secrets = list(secrets)
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, Mapping):
        return {key: redact(item, secrets) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(item, secrets) for item in value]
    return value


def url_secrets(url: str) -> list[str]:
    """The secrets written into ``url``: its password (or a lone userinfo token), as
    written and percent-decoded, since an error may show either, and the Basic
    authorization an HTTP client makes of them (a server may echo it back)."""
    try:
        userinfo, at, _host = urllib.parse.urlsplit(url).netloc.rpartition("@")
    except ValueError:
        return []
    if not at:
        return []
    user, colon, password = userinfo.partition(":")
    secret = password if colon else user
    basic = base64.b64encode(urllib.parse.unquote(userinfo).encode()).decode()
    return sorted({form for form in (secret, urllib.parse.unquote(secret), basic)
                   if len(form) >= MIN_SECRET_CHARS}, key=len, reverse=True)
