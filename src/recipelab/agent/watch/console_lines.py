"""The campaign's console for a person: one short line per finished trial and per phase.

``events.jsonl`` keeps every event with every field; ``recipelab logs -f`` and
``--log-format events`` render them all as ``key=value`` lines, ``--log-format json`` as
JSON. A person watching the night needs less: what finished, how it did against the
baseline, which knobs it moved, where the ladder is and who won. :class:`ReadableLines` is
the structlog renderer that prints that, and drops the events a person does not need
(``proposal``, ``trial_started``, ``promoted``: the finished line and the phase line say it;
``campaign_finished``: the command prints the summary).

It remembers two things across events: each trial's edit (from ``trial_started``) and the
baseline's val_bpb at each token budget and seed, so a finished trial reads as a paired gain
over the baseline run at its own tokens and seed (the noise a seed adds cancels in the pair).
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Mapping
from typing import Any

import structlog

from recipelab.eventlog import LogFormat, console_renderer
from recipelab.recipe import BASELINE_PROPOSER
from recipelab.text import clip, compact_edit
from recipelab.trajectory.noise import SEED_RERUN_PROPOSER
from recipelab.transfer.steplaw import LR_PARAMS_EXPONENT

LINE_LIMIT = 160
INDENT = "      "  # a rejection's reason, under its line
QUIET = frozenset({"proposal", "trial_started", "promoted", "rung_run", "preflight"})


def _number(value: Any, digits: int = 4, *, signed: bool = False) -> str:
    sign = "+" if signed else ""
    return f"{value:{sign}.{digits}f}" if isinstance(value, (int, float)) and math.isfinite(value) \
        else str(value)


def _tokens(tokens: Any) -> str:
    if not isinstance(tokens, int):
        return "?"
    return f"{tokens / 1e6:.1f}M" if tokens >= 1_000_000 else f"{tokens / 1e3:.0f}k"


def console_output(log_format: LogFormat, colors: bool) -> Any:
    """The campaign console's last processor: the event as ``log_format`` shows it."""
    if log_format == "lines":
        return ReadableLines()
    if log_format == "json":
        return structlog.processors.JSONRenderer(default=str)
    return console_renderer(colors)


class ReadableLines:
    """A structlog renderer: ``event`` in, one short line out (or the event dropped)."""

    def __init__(self) -> None:
        self.edits: dict[str, Mapping[str, Any]] = {}
        self.seeds: dict[str, int] = {}
        self.reruns: dict[str, str] = {}  # seed re-run -> the trial it repeats
        self.parents: dict[str, str] = {}
        self.baseline_runs: set[str] = set()
        self.baseline: dict[tuple[int, int], float] = {}  # (tokens, seed) -> val_bpb

    def __call__(self, _logger: Any, _method: str, event: Mapping[str, Any]) -> str:
        line = self.line(event)
        if line is None:
            raise structlog.DropEvent
        return line

    def line(self, event: Mapping[str, Any]) -> str | None:
        """The line for ``event``, or None when a person does not need it."""
        name = str(event.get("event", ""))
        if name == "trial_started":
            self._remember(event)
        render = getattr(self, f"_{name}", None)
        if render is not None:
            found: str | None = render(event)
            return found
        if name in QUIET:
            return None
        return self._generic(event)

    def _remember(self, event: Mapping[str, Any]) -> None:
        trial = str(event.get("trial_id"))
        self.edits[trial] = event.get("edit") or {}
        self.seeds[trial] = int(event.get("seed") or 0)
        if event.get("parent"):
            self.parents[trial] = str(event["parent"])
        unseeded = {k: v for k, v in (event.get("edit") or {}).items() if k != "seed"}
        if event.get("proposer") == BASELINE_PROPOSER or (
                event.get("kind") == "attribution" and not unseeded):
            self.baseline_runs.add(trial)
        elif event.get("proposer") == SEED_RERUN_PROPOSER and event.get("parent"):
            self.reruns[trial] = str(event["parent"])

    def _gain(self, trial: str, tokens: int, value: float) -> str:
        """The paired gain over the baseline at the same tokens and seed, when it is known
        (a run with a larger batch trains fewer steps of the same tokens)."""
        seed = self.seeds.get(trial, 0)
        if trial in self.baseline_runs:
            self.baseline.setdefault((tokens, seed), value)
            return "baseline"
        reference = self.baseline.get((tokens, seed))
        return (f"{reference - value:+.4f} vs baseline at seed {seed}" if reference is not None
                else "")

    def _trial_finished(self, event: Mapping[str, Any]) -> str:
        trial, kind = str(event.get("trial_id")), str(event.get("kind"))
        status = event.get("status")
        if status == "rejected":
            return f"{trial} rejected: {event.get('message') or event.get('reason')}"
        head = f"{trial} {kind:<11} {event.get('steps', '?'):>5} steps {_tokens(event.get('tokens')):>6}"
        value = event.get("val_bpb")
        if status != "complete" or not isinstance(value, (int, float)):
            return f"{head}  {status}: {event.get('message') or event.get('reason') or ''}".rstrip()
        edit = self.edits.get(trial, {})
        width = kind == "width"  # another model's size: no baseline to compare it with
        gain = "" if width else self._gain(trial, int(event.get("tokens") or 0), float(value))
        wall = event.get("wall_s")
        shown = {k: v for k, v in edit.items() if k not in ("seed", "lr_family")}
        what = "" if trial in self.baseline_runs else compact_edit(shown, {})
        if width:
            what = f"{self.parents.get(trial, '?')} at {edit.get('width_multiple')}× the proxy's width"
            what += " (the baseline, the control)" if edit.get("arm") == "baseline" else ""
            what += f" at lr × {edit['lr_family']:g}" if "lr_family" in edit else ""
        elif "lr_family" in edit:  # the baseline's family, or a candidate's probe
            parent = self.parents.get(trial)
            whose = "the baseline" if parent is None or parent in self.baseline_runs else parent
            what = f"{whose} at lr × {edit['lr_family']:g}"
        elif trial in self.reruns:
            what = f"{self.reruns[trial]} at seed {self.seeds.get(trial, 0)}"
        return clip(f"{head}  val_bpb {_number(value)}  {gain:<20} "
                    f"{_number(wall, 0) + 's' if wall is not None else '':>5}  {what}".rstrip(),
                    LINE_LIMIT)

    def _rejected(self, event: Mapping[str, Any]) -> str:
        """The rejected edit, then its first reason whole (the reason is the news, and it
        says what to change), wrapped under it; a count of any other reasons."""
        reasons = [str(r) for r in event.get("reasons") or []] or ["(no reason given)"]
        more = f" (+{len(reasons) - 1} more reason(s) in events.jsonl)" if len(reasons) > 1 else ""
        edit = compact_edit(event.get("edit") or {}, {})
        head = clip(f"{event.get('trial_id')} rejected ({edit}){more}:", LINE_LIMIT)
        return "\n".join([head, textwrap.fill(reasons[0], LINE_LIMIT, initial_indent=INDENT,
                                               subsequent_indent=INDENT)])

    def _campaign_started(self, event: Mapping[str, Any]) -> str:
        return (f"campaign {event.get('campaign')}: {event.get('preset')} proxy "
                f"({event.get('params', 0):,} parameters) of {event.get('target')} on "
                f"{event.get('corpus')}; {event.get('iterations')} proxy trials, "
                f"{event.get('parallel')} at a time, {event.get('precision')} on {event.get('device')}")

    def _ladder_planned(self, event: Mapping[str, Any]) -> str:
        return f"ladder: {event.get('ladder') or event.get('rungs')} (eta {event.get('eta')})"

    def _rung_started(self, event: Mapping[str, Any]) -> str:
        which = "top rung" if event.get("top") else "rung"
        climbers = ", ".join(event.get("climbers") or [])
        seeds = len(event.get("seeds") or [0])
        return (f"── {which}: {event.get('steps')} steps ({_tokens(event.get('tokens'))} tokens), "
                f"{climbers} × {seeds} seed(s) beside the baseline, "
                f"lr × {_number(event.get('lr_factor'), 3)} ({event.get('rule_source')} horizon rule)")

    def _close_call(self, event: Mapping[str, Any]) -> str:
        seeds = ", ".join(str(s) for s in event.get("seeds") or [])
        factor = event.get("control_lr_factor") or 1.0
        control = "the baseline" if factor == 1.0 else f"the baseline at {factor:g}× its rate"
        return clip(f"── close call: {event.get('trial_id')} gains "
                    f"{_number(event.get('gain'), 4, signed=True)} "
                    f"[{_number(event.get('gain_low'), 4, signed=True)}, "
                    f"{_number(event.get('gain_high'), 4, signed=True)}] over {control} at "
                    f"{event.get('steps')} steps; both train seed(s) {seeds} for a second look",
                    LINE_LIMIT)

    def _probes_started(self, event: Mapping[str, Any]) -> str:
        candidates = event.get("candidates") or []
        multiples = event.get("lr_multiples") or [event.get("lr_multiple")]
        return clip(f"── probes: {event.get('steps')} steps again at lr × "
                    + " and × ".join(_number(m, 2) for m in multiples)
                    + f" for {len(candidates)} candidate(s), so a rate meant for the long run, "
                    "or too hot here, is not cut: "
                    + ", ".join(candidates), LINE_LIMIT)

    def _stress_verdict(self, event: Mapping[str, Any]) -> str | None:
        if event.get("verdict") == "stable":
            return None
        return f"{event.get('trial_id')} {event.get('verdict')}: {event.get('explanation')}"

    def _attribution_started(self, event: Mapping[str, Any]) -> str:
        return (f"── attribution of {event.get('trial_id')}: which of its "
                f"{len(event.get('groups') or {})} groups of changes carry the gain, at "
                f"{event.get('steps')} steps × {len(event.get('seeds') or [0])} seed(s)")

    def _attribution_finished(self, event: Mapping[str, Any]) -> str:
        kept = ", ".join(event.get("kept") or []) or "nothing"
        dropped = ", ".join(event.get("dropped") or []) or "nothing"
        return f"   keeps {kept}; drops {dropped}"

    def _width_started(self, event: Mapping[str, Any]) -> str:
        sizes = " and ".join(f"{n:,}" for n in event.get("sizes") or [])
        return clip(f"── width rung of {event.get('trial_id')}: its recommendation at "
                    f"{sizes} non-embedding parameters, {_tokens(event.get('tokens'))} tokens "
                    f"at context {event.get('context')}, for the export's size term", LINE_LIMIT)

    def _width_measured(self, event: Mapping[str, Any]) -> str:
        scored = f"   twice the width scored {_number(event.get('narrow'))} → {_number(event.get('wide'))}"
        if event.get("target_lowering") is None:
            line = f"{scored}: no gap measured, the export keeps the law's size term"
        else:
            line = (f"{scored}: the law puts the target {_number(event.get('target_lowering'))} "
                    "below the proxy's width at equal tokens")
        exponent, se = event.get("lr_size_exponent"), event.get("lr_size_exponent_se")
        if isinstance(exponent, (int, float)) and isinstance(se, (int, float)):
            line += (f"\n   the best rate falls as N^{exponent:.3f} ± {se:.3f} between the two "
                     f"widths (Step Law: N^{LR_PARAMS_EXPONENT})")
        gain, floor = event.get("gain_at_twice_width"), event.get("gain_floor")
        if not isinstance(gain, (int, float)):
            return line
        if isinstance(floor, (int, float)) and abs(gain) <= floor:
            return line + (f"\n   at twice the width its gain over the baseline, {gain:+.4f}, is "
                           f"within the noise floor (±{floor:.4f})")
        if gain > 0:
            return line + f"\n   at twice the width it beats the baseline by {gain:+.4f}"
        if event.get("baseline_kept"):
            return line + (f"\n   at twice the width the baseline beats it by {-gain:.4f}, more "
                           f"than the noise floor (±{floor:.4f}): the campaign keeps the baseline")
        return line + (f"\n   at twice the width it does not beat the baseline ({gain:+.4f}): "
                       "the gain did not hold one size up")

    def _campaign_finished(self, _event: Mapping[str, Any]) -> None:
        return None  # the command prints the campaign's summary, winner and recommendation

    def _generic(self, event: Mapping[str, Any]) -> str:
        """Any other event: its name and its first fields, short."""
        fields = {k: v for k, v in event.items()
                  if k not in ("event", "campaign", "timestamp", "level")}
        level = str(event.get("level", "info"))
        prefix = "" if level == "info" else f"{level}: "
        text = " ".join(f"{k}={v if isinstance(v, (int, float, str)) else json.dumps(v, default=str)}"
                        for k, v in fields.items())
        return clip(f"{prefix}{event.get('event')} {text}".rstrip(), LINE_LIMIT)
