"""Structured events, one pipeline for the campaign and the long run: JSON lines in
``events.jsonl`` and console lines: every field as ``key=value`` by default; a campaign's
console may pass short lines for a person (:mod:`recipelab.agent.watch.console_lines`) or JSON.

Every event carries ``campaign`` and, where there is one, ``trial_id`` (a long run: ``run``).
Secrets (API keys taken from the environment, URL credentials) are scrubbed from every value
before anything is written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any, Literal, TextIO

import structlog
from rich.console import Console

from recipelab import environment
from recipelab.redaction import redact

EVENTS_FILE = "events.jsonl"

LogFormat = Literal["lines", "events", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("lines", "events", "json")
"""How a campaign's console shows events: short lines for a person
(:mod:`recipelab.agent.watch.console_lines`), every field as ``key=value``, or JSON."""

EventDict = MutableMapping[str, Any]


def redact_secrets(_logger: Any, _method: str, event: EventDict) -> EventDict:
    secrets = environment.secrets()
    return {key: redact(value, secrets) for key, value in event.items()}


class JsonlSink:
    """A processor that appends each event to ``events.jsonl`` and passes it on unchanged."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: TextIO = path.open("a", encoding="utf-8")

    def __call__(self, _logger: Any, _method: str, event: EventDict) -> EventDict:
        self._file.write(json.dumps(event, default=str, separators=(",", ":")) + "\n")
        self._file.flush()
        return event

    def close(self) -> None:
        self._file.close()


class ConsoleLogger:
    """The final sink: prints the rendered line on the (rich) console, above any live display."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def msg(self, message: str) -> None:
        self.console.print(message, markup=False, highlight=False, soft_wrap=True)

    info = debug = warning = error = critical = exception = msg


def console_renderer(colors: bool) -> structlog.dev.ConsoleRenderer:
    return structlog.dev.ConsoleRenderer(colors=colors, sort_keys=False,
                                         exception_formatter=structlog.dev.plain_traceback)


def event_logger(path: Path | None, console: Console | None = None, renderer: Any = None,
                 **bound: Any) -> tuple[Any, JsonlSink | None]:
    """A logger bound to ``bound`` (``campaign=...``), writing every event to ``path`` (none:
    the console only) and to the console through ``renderer`` (default: ``key=value``
    lines), and the sink to close at the end."""
    console = console or Console(stderr=True)
    sink = JsonlSink(path) if path is not None else None
    logger = structlog.wrap_logger(
        ConsoleLogger(console),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact_secrets,
            *([sink] if sink is not None else []),
            renderer or console_renderer(colors=console.is_terminal),
        ],
    )
    return logger.bind(**bound), sink


def campaign_logger(campaign: str, directory: Path, console: Console | None = None,
                    renderer: Any = None) -> tuple[Any, JsonlSink]:
    """A bound logger for one campaign, and the sink to close when the campaign ends."""
    logger, sink = event_logger(directory / EVENTS_FILE, console, renderer, campaign=campaign)
    assert sink is not None
    return logger, sink


def read_events(path: Path, follow: bool = False,
                poll_s: float = 0.5) -> Iterator[dict[str, Any]]:
    """Parse ``events.jsonl``, skipping a line cut short by a crash; with ``follow``, wait
    for new lines like ``tail -f``."""
    with path.open(encoding="utf-8") as handle:
        pending = ""
        while True:
            line = handle.readline()
            if not line:
                if not follow:
                    return
                time.sleep(poll_s)
                continue
            pending += line
            if not pending.endswith("\n") and follow:
                continue  # a line still being written
            text, pending = pending, ""
            try:
                yield json.loads(text)
            except json.JSONDecodeError:
                continue


def render_event(event: Mapping[str, Any], colors: bool = False) -> str:
    rendered: str = console_renderer(colors)(None, "info", dict(event))
    return rendered
