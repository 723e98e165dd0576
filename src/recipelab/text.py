"""Text recipelab writes for people and for the LLM: clipping, and the renderings of an edit.

An edit is rendered two ways on purpose. People (``recipelab status``, the report) read
``optimizer.lr=0.003, batch_size=16``. The LLM (its prompt, and the calibration from earlier
campaigns it is shown) reads compact JSON: the knob names and values are spelt as in the
JSON it answers with, and every string, a model's own included, stays quoted data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

ELLIPSIS = "…"


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + ELLIPSIS


def compact_json(value: Any) -> str:
    """``value`` as one line of JSON, with a space after each separator for readability."""
    return json.dumps(value, default=str, ensure_ascii=False, separators=(", ", ": "))


def edit_text(edit: Mapping[str, Any], *, short_names: bool = False) -> str:
    """An edit for a person, ``(baseline)`` when nothing changed. ``short_names`` keeps only
    the last part of each knob's dotted name, for a narrow table column."""
    return ", ".join(f"{short_name(k) if short_names else k}={v}"
                     for k, v in edit.items()) or "(baseline)"


def short_name(knob: str) -> str:
    """The last part of a dotted knob name, ``schedule`` for ``schedule.kind``."""
    return "schedule" if knob == "schedule.kind" else knob.split(".")[-1]


def edit_json(edit: Mapping[str, Any], limit: int) -> str:
    """An edit for the LLM, clipped to ``limit`` characters; ``(the baseline)`` when nothing
    changed."""
    return clip(compact_json(dict(edit)), limit) if edit else "(the baseline)"


def relative_change(old: Any, new: Any) -> float:
    """How far a knob moved, as a fraction of its old value: ``|new - old| / |old|`` for
    numbers; 1.0 for a switch, a category, or a knob the parent lacked (a change of kind)."""
    numbers = (int, float)
    if (isinstance(old, numbers) and isinstance(new, numbers) and not isinstance(old, bool)
            and not isinstance(new, bool) and old != 0):
        return abs(new - old) / abs(old)
    return 1.0


KEY_KNOBS = ("optimizer.lr", "schedule.kind", "batch_size", "grad_accum", "seq_len",
             "optimizer.weight_decay", "schedule.warmup_steps")
"""The knobs a reader looks for first in an edit, in that order: the rate, the schedule and
the batch decide most of a recipe's result."""


def compact_edit(edit: Mapping[str, Any], parent: Mapping[str, Any], limit: int = 3) -> str:
    """An edit for a table cell or a console line: the :data:`KEY_KNOBS` it changes first,
    then its largest relative changes from ``parent``'s values (short knob names), then
    ``+N more``; ``(baseline)`` when nothing changed. A twenty-knob edit spelt out in full
    makes a table unreadable, and ranked by relative change alone ``eps`` leads every one."""
    def rank(knob: str) -> tuple[int, float, str]:
        if knob in KEY_KNOBS:
            return KEY_KNOBS.index(knob), 0.0, knob
        return len(KEY_KNOBS), -relative_change(parent.get(knob), edit[knob]), knob

    ranked = sorted(edit, key=rank)
    shown = edit_text({k: edit[k] for k in ranked[:limit]}, short_names=True) if ranked else ""
    more = len(ranked) - limit
    return (shown or "(baseline)") + (f" +{more} more" if more > 0 else "")
