"""How far an export extrapolates, set beside how far the transfer was verified.

An export moves a recipe measured on the proxy to a target many times larger, trained many
times longer. Its prediction is only as good as the distance it was checked at. This module
states that distance in three ratios against the proxy's longest run (non-embedding
parameters, training tokens, context) and compares it with the distance
``bench/transfer.py`` verified end to end, which the bench writes to
``verified_transfer.json`` beside this module and the package ships. The verification holds
for the text the bench trained on: a campaign on another corpus is warned that nothing
measured covers it (on the standard library's prose the bench found every prediction 17-24%
high, where on python-source 5 of 6 were within 5%). No figure here is written by hand:
without that file, the export says nothing was verified.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PREDICTION_BAR = 0.05
"""The promise: a cloud run lands within this fraction of its prediction."""
VERIFIED_PATH = Path(__file__).with_name("verified_transfer.json")
"""Written by ``python bench/transfer.py --ship``; read by every export."""


@dataclass(frozen=True)
class Distance:
    """Target ÷ proxy: non-embedding parameters, training tokens (against the proxy's
    longest run) and context length."""

    params: float
    tokens: float
    context: float

    @classmethod
    def between(cls, proxy: tuple[int, int, int], target: tuple[int, int, int]) -> Distance:
        """From ``(non-embedding params, tokens, seq_len)`` of the proxy and of the target."""
        return cls(*(t / max(p, 1) for p, t in zip(proxy, target, strict=True)))

    def text(self) -> str:
        return (f"{_times(self.params)} the proxy's non-embedding parameters, "
                f"{_times(self.tokens)} the tokens of its longest run and "
                f"{_times(self.context)} its context")

    def beyond(self, verified: Distance) -> list[str]:
        """The axes on which this distance exceeds ``verified`` (a tenth of slack)."""
        return [name for name in ("params", "tokens", "context")
                if getattr(self, name) > 1.1 * getattr(verified, name)]

    def to_json(self) -> dict[str, float]:
        return asdict(self)


AXIS_WORDS = {"params": "parameters", "tokens": "tokens", "context": "context"}


@dataclass(frozen=True)
class Verified:
    """What ``bench/transfer.py`` measured: the distance every campaign of it reached, and
    its bars as it printed them."""

    distance: Distance
    campaigns: int
    seeds: int
    held: int  # campaigns whose pick beat the exported baseline beyond the seed spread
    prediction_errors: list[float]  # the recommendation's, one per campaign
    baseline_prediction_errors: list[float]
    rate_factors: list[float]  # exported rate ÷ the target's best, one per campaign
    code_version: str
    date: str
    kept: int = 0  # campaigns that kept the baseline: they named no pick to beat it
    corpus: str = ""  # the text every campaign and arm trained on; "" in a file from before

    def text(self) -> str:
        errors = "/".join(f"{e:.1%}" for e in self.prediction_errors)
        base = "/".join(f"{e:.1%}" for e in self.baseline_prediction_errors)
        rates = "/".join(f"{f:.2f}" for f in self.rate_factors)
        on = f" on {self.corpus}" if self.corpus else ""
        return (f"bench/transfer.py verified {self.distance.text()}{on} "
                f"({_count(self.campaigns, 'campaign')}, "
                f"{_count(self.seeds, 'seed')}, {self.date}, code {self.code_version}): the pick beat the "
                f"exported baseline beyond the seed spread in {self.held} of "
                f"{self.campaigns - self.kept}{f' ({self.kept} kept the baseline)' if self.kept else ''}; "
                f"prediction error {errors} (the baseline's {base}); exported rate "
                f"{rates}× the target's best")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "distance": self.distance.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Verified:
        return cls(**{**data, "distance": Distance(**data["distance"])})


def load_verified(path: Path | None = None) -> Verified | None:
    """The shipped verification, or None when this install has none (or it is unreadable:
    then nothing is claimed)."""
    try:
        return Verified.from_json(json.loads((path or VERIFIED_PATH).read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def distance_lines(distance: Distance, verified: Verified | None,
                   band: tuple[float, float], corpus: str | None = None) -> list[str]:
    """The export's statement of its distance, what was verified, and a warning line when
    it goes further, or when the campaign trained on another ``corpus`` than the bench."""
    lines = [f"Distance: this export extrapolates {distance.text()}."]
    low, high = band
    if verified is None:
        return [*lines, "Verified: no bench/transfer.py result ships with this install, so no "
                "distance is (run 'python bench/transfer.py --ship' to record one).",
                f"Warning: the predicted band {low:.3f}–{high:.3f} is the fit's alone; "
                "nothing measured says how far it holds."]
    lines.append(f"Verified: {verified.text()}.")
    beyond = distance.beyond(verified.distance)
    if beyond:
        words = ", ".join(AXIS_WORDS[axis] for axis in beyond)
        lines.append(f"Warning: beyond the verified distance in {words}: the predicted band "
                     f"{low:.3f}–{high:.3f} is the fit's, unmeasured this far.")
    if verified.corpus and corpus and corpus != verified.corpus:
        lines.append(f"Warning: verified on {verified.corpus}, and this campaign trained on "
                     f"{corpus}: nothing measured says the prediction holds on other text, so "
                     f"the band {low:.3f}–{high:.3f} is the fit's alone.")
    worst = max([*verified.prediction_errors, *verified.baseline_prediction_errors], default=0.0)
    if worst > PREDICTION_BAR:
        lines.append(f"Warning: where it was verified the prediction missed by up to "
                     f"{worst:.0%}, beyond the {PREDICTION_BAR:.0%} a cloud run is held to: "
                     f"the band {low:.3f}–{high:.3f} is not yet a measured one.")
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _times(ratio: float) -> str:
    return f"{ratio:,.0f}×" if ratio >= 10 else f"{ratio:.2g}×"
