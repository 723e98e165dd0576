"""What a person watches while a campaign runs, or after: read from its events and records.

- :mod:`~recipelab.agent.watch.console_lines`: one short line per finished trial and phase;
- :mod:`~recipelab.agent.watch.display`: the live progress line on a terminal;
- :mod:`~recipelab.agent.watch.live_report`: the report, rewritten as trials finish;
- :mod:`~recipelab.agent.watch.status`: what ``recipelab status`` shows, with no lock and no
  writes.

Entry point: :func:`campaign_status`.
"""

from __future__ import annotations

from typing import Any

from recipelab.lazy import lazy_export

EXPORTS = {"campaign_status": "recipelab.agent.watch.status"}
__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    """The entry points, imported on first use."""
    return lazy_export(__name__, EXPORTS, name)
