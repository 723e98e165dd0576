"""The predicted validation curve of the cloud run, in val_bpb against bytes of text trained on.

A proxy cannot predict the absolute loss of a model a thousand times its size, and its
training loss is in nats per *proxy* token: a BPE target's loss per token is several times
larger, so reading a proxy's loss curve at the cloud run's step count compares unlike units.
Two choices make the prediction comparable with what the cloud run measures:

- the y-axis is val_bpb, which compares across tokenizers and vocabularies: the winner's
  stress-run training loss is converted by the ratio of its measured val_bpb to its last
  training loss (which also folds in the train/validation gap of that run);
- the x-axis is bytes of training text seen (tokens × bytes per token), not steps, since
  the cloud run's batch and tokenizer differ from the proxy's.

When the campaign measured them, the prediction is Chinchilla's ``L(N, D) = E + A·N^-α +
B·D^-β`` with each term from the measurement closest to the target (:attr:`Prediction.from_wide`):
the level from the width rung's wider model at its best rate (:mod:`~recipelab.transfer.width`:
the largest model trained, at the target's context and by the export's rules), the data term
``B·D^-β`` through the recipe's best at each horizon of the ladder
(:mod:`~recipelab.transfer.horizons`), and the size term ``A`` from the rung's two widths,
carried from the wider model's size to the target's. ``bench/transfer.py``: 5 of 6 arms within
5% (mean 3.6%), where the proxy's stress curve below put 2 of 6 there (mean 8.2%). Its band
is the seed's noise in those measurements carried through the law by a bootstrap
(:mod:`~recipelab.transfer.law_band`). Without a width rung or three horizons the prediction is
the proxy's stress curve, as follows.

The curve ends at the recipe's best rate where it was trained (:func:`tuned_level`): a stress
run at a rate its own learning-rate family beat would carry the proxy's mistuned rate into the
prediction, though the export sets the target's rate afresh.

A larger model reaches a lower loss from the same text, so the proxy's curve is moved by a
model-size term. When the campaign's width rung trained the recommendation at two sizes
(:mod:`recipelab.transfer.width`), their measured gap, carried to the target's size by
Chinchilla's law, lowers the curve. Otherwise the curve is scaled by the ratio of a published
law of the loss in parameters and data,
``L(N, D) = ((N_c/N)^(α_N/α_D) + D_c/D)^α_D`` (Kaplan et al. 2020, arXiv 2001.08361), at the
target's and at the proxy's non-embedding parameters, at the same bytes (:class:`SizeTerm`).
The law sets the ratio, the campaign's measurement the level, as the export's Step Law does
for the rate and batch. The law's form matters more than its constants: at little data per
parameter both models are data-limited and the term is near 1; with data to spare it grows
toward the ratio of the models' own limits. The band around the curve is the larger of
the noise floor (seed-to-seed spread of the baseline) and the fit's residual, widened by one
band per decade read beyond the fitted range, with a floor of :data:`MIN_BAND_FRACTION` of the
value so that a run of three trials never claims more certainty than it has. A fit that is
not physical (:attr:`Prediction.unphysical`: a floor below 0, a curve that does not fall) says
so beside the prediction; beyond a curve whose floor was held at 0 the band spans the fit and
the curve held flat at its last measurement.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from recipelab.recipe import Recipe, Shape, non_embedding_params
from recipelab.trajectory.analysis import scored_proxies, spearman
from recipelab.trajectory.horizon import families
from recipelab.trajectory.noise import noise_floor
from recipelab.trajectory.record import TrialRecord
from recipelab.transfer.horizons import Horizons, horizons, scores_by_rate
from recipelab.transfer.law_band import CONFIDENCE, DRAWS, LawBand, law_band
from recipelab.transfer.powerlaw import PowerLaw, fit_power_law
from recipelab.transfer.width import WIDTH_ALPHA, SizeGap, WideLevel, measured_gap, wide_level

MIN_BAND_FRACTION = 0.02
BYTE_TOKEN_BYTES = 1.0
ASSUMED_BPE_BYTES_PER_TOKEN = 4.0  # English web text under a 32k-128k BPE vocabulary


KAPLAN_N_C = 8.8e13  # non-embedding parameters
KAPLAN_D_C = 5.4e13  # tokens of a ~4-byte BPE
KAPLAN_ALPHA_N = 0.076
KAPLAN_ALPHA_D = 0.095
SIZE_LAW = "Kaplan et al. 2020 (arXiv 2001.08361)"


def size_law_loss(params: float, bytes_seen: float) -> float:
    """The law's loss, in its own units, of ``params`` non-embedding parameters trained on
    ``bytes_seen`` bytes of text (read as tokens of a ~4-byte BPE, the law's unit)."""
    tokens = max(bytes_seen, 1.0) / ASSUMED_BPE_BYTES_PER_TOKEN
    limit = (KAPLAN_N_C / params) ** (KAPLAN_ALPHA_N / KAPLAN_ALPHA_D)
    return float((limit + KAPLAN_D_C / tokens) ** KAPLAN_ALPHA_D)


@dataclass(frozen=True)
class SizeTerm:
    """The model-size term: the target's loss over the proxy's at equal bytes of text, by the
    size law (below 1 for a larger target, 1 for the proxy itself)."""

    proxy_params: int
    target_params: int

    def factor(self, bytes_seen: float) -> float:
        return size_law_loss(self.target_params, bytes_seen) / size_law_loss(
            self.proxy_params, bytes_seen)

    def describe(self) -> str:
        return (f"size: {SIZE_LAW}, L(N, D) = ((N_c/N)^(α_N/α_D) + D_c/D)^α_D with N_c "
                f"{KAPLAN_N_C:.2g}, D_c {KAPLAN_D_C:.2g} tokens (~{ASSUMED_BPE_BYTES_PER_TOKEN:g} "
                f"bytes each), α_N {KAPLAN_ALPHA_N}, α_D {KAPLAN_ALPHA_D}: the target's "
                f"{self.target_params:,} non-embedding parameters against the proxy's "
                f"{self.proxy_params:,} scale the proxy's curve by the law's ratio at each "
                "point (near 1 while both are data-limited)")

    def to_json(self) -> dict[str, object]:
        return {"law": SIZE_LAW, "proxy_params": self.proxy_params,
                "target_params": self.target_params,
                "constants": {"N_c": KAPLAN_N_C, "D_c": KAPLAN_D_C, "alpha_N": KAPLAN_ALPHA_N,
                              "alpha_D": KAPLAN_ALPHA_D,
                              "bytes_per_token": ASSUMED_BPE_BYTES_PER_TOKEN}}


@dataclass(frozen=True)
class TunedLevel:
    """The recipe at its best rate where its stress run trained: the lowest mean val_bpb of
    its learning-rate family at that budget, over the seeds each rate trained."""

    val_bpb: float
    multiple: float  # that rate over the stress run's
    stress_val_bpb: float  # the stress run's own, at its rate
    seeds: int

    def describe(self) -> str:
        return (f"level: the recipe at {self.multiple:g}× the stress run's rate, its family's "
                f"best at that budget ({self.val_bpb:.4f}, {self.seeds} seed(s), against "
                f"{self.stress_val_bpb:.4f} at × 1): the export sets the target's rate afresh, "
                "so the target does not inherit the proxy's mistuned rate")

    def to_json(self) -> dict[str, float | int]:
        return {"val_bpb": self.val_bpb, "multiple": self.multiple,
                "stress_val_bpb": self.stress_val_bpb, "seeds": self.seeds}


def tuned_level(records: Sequence[TrialRecord], trial_id: str, run: TrialRecord
                ) -> TunedLevel | None:
    """``trial_id`` at its family's best rate at ``run``'s budget, when that rate scored
    below the run's own rate; None without a family there or when × 1 was the best."""
    by_rate = scores_by_rate(families(records).get(trial_id, {}).get(run.budget_steps, []))
    own = float(run.recipe["optimizer"]["lr"])
    at_own = next((values for lr, values in by_rate.items() if math.isclose(lr, own)), None)
    if not at_own or len(by_rate) < 2:
        return None
    lr, values = min(by_rate.items(), key=lambda item: sum(item[1]) / len(item[1]))
    level, stress = sum(values) / len(values), sum(at_own) / len(at_own)
    if level >= stress:
        return None
    return TunedLevel(val_bpb=level, multiple=lr / own, stress_val_bpb=stress, seeds=len(values))


@dataclass(frozen=True)
class Prediction:
    """val_bpb(bytes of training text seen) with its band and what it rests on."""

    source_trial: str
    fit: PowerLaw | None
    last_bytes: float  # the end of the fitted range
    last_val_bpb: float  # the measured val_bpb at its end
    band_base: float
    noise_spread: float | None
    fit_rmse_bpb: float | None
    rank_agreement: float | None
    rank_pairs: int
    size: SizeTerm | None = None  # None: the proxy's own curve (the target is the proxy)
    measured_size: SizeGap | None = None  # the width rung's, which replaces the law's ratio
    tuned: TunedLevel | None = None  # the level the curve was moved to, below the run's own
    horizons: Horizons | None = None  # the data term through the ladder's horizons
    wide: WideLevel | None = None  # the width rung's wider model, where the prediction starts
    seed_sd: float | None = None  # the baseline's seed-to-seed standard deviation, val_bpb

    @property
    def from_wide(self) -> bool:
        """Whether the prediction starts from the width rung's wider model (:meth:`center`):
        with the wider model, the ladder's horizons and a measured gap."""
        return (self.size is not None and self.wide is not None and self.horizons is not None
                and self.measured_size is not None and self.measured_size.measured)

    def proxy_center(self, bytes_seen: float) -> float:
        """The proxy's curve; flat at the last measurement when no curve could be fitted,
        and never above it beyond the fitted range (more training does not raise the loss)."""
        if self.fit is None or bytes_seen <= 0:
            return self.last_val_bpb
        if bytes_seen >= self.last_bytes:
            return min(self.fit(bytes_seen), self.last_val_bpb)
        return self.fit(bytes_seen)

    def center(self, bytes_seen: float) -> float:
        """The predicted val_bpb of the target. From the width rung's wider model
        (:attr:`from_wide`): its level, moved along the ladder's data term to
        ``bytes_seen`` and down by the measured size gap from its size to the target's.
        Otherwise the proxy's curve moved by the size term (:meth:`moved`); beyond the fitted
        range of a fit whose floor was held at 0 (:attr:`unphysical`), halfway between that
        and the curve held flat (:meth:`held`)."""
        if self.from_wide:
            assert self.wide and self.horizons and self.measured_size and self.size
            return (self.wide.val_bpb + self.horizons.change(self.wide.bytes_seen, bytes_seen)
                    - self.measured_size.lowering(self.wide.params, self.size.target_params))
        fitted = self.moved(self.proxy_center(bytes_seen), bytes_seen)
        if not self._held_at_zero(bytes_seen):
            return fitted
        return (fitted + self.held(bytes_seen)) / 2

    def held(self, bytes_seen: float) -> float:
        """The target's val_bpb were the proxy's curve to stop at its last measurement."""
        return self.moved(self.last_val_bpb, bytes_seen)

    def moved(self, proxy_value: float, bytes_seen: float) -> float:
        """A proxy val_bpb at ``bytes_seen`` moved to the target: less the gap the width rung
        measured (:mod:`recipelab.transfer.width`), else × the law's size term (also when the
        wider run scored no better)."""
        if self.size is None:
            return proxy_value
        if self.measured_size is not None and self.measured_size.measured:
            return proxy_value - self.measured_size.lowering(self.size.proxy_params,
                                                             self.size.target_params)
        return proxy_value * self.size.factor(bytes_seen)

    def _held_at_zero(self, bytes_seen: float) -> bool:
        return (not self.from_wide and self.fit is not None and self.fit.bounded
                and bytes_seen > self.last_bytes)

    def describe_size(self) -> str:
        """The size term in words: the width rung's, the law's, or none."""
        if self.size is None:
            return "size: none (the target is the proxy's size)"
        gap = self.measured_size
        if gap is None:
            return self.size.describe() + " (no width rung measured it)"
        if not gap.measured:
            return (self.size.describe() + f" (the width rung measured no gap: twice the width "
                    f"scored {gap.wide_val_bpb:.4f} against {gap.narrow_val_bpb:.4f})")
        lowering = gap.lowering(self.size.proxy_params, self.size.target_params)
        return (f"size: {gap.describe()}; the target's "
                f"{self.size.target_params:,} non-embedding parameters put it {lowering:.4f} "
                f"below the proxy's {self.size.proxy_params:,} at every point")

    def half_width(self, bytes_seen: float) -> float:
        """The band without a bootstrap: ``band_base`` (from the wider model, the noise floor
        or the horizons' residual) widened by one band per decade beyond the fitted range;
        beyond it, from a fit whose floor was held at 0, at least wide enough to span the fit
        and the curve held flat at its last measurement."""
        base, end = self.band_base, self.last_bytes
        if self.from_wide:
            assert self.wide and self.horizons
            base, end = max(self.noise_spread or 0.0, self.horizons.fit.rmse), self.wide.bytes_seen
        beyond = max(0.0, math.log10(bytes_seen / end)) if bytes_seen > 0 else 0.0
        floor = MIN_BAND_FRACTION * self.center(bytes_seen)
        half = max(base, floor) * (1.0 + beyond)
        if self._held_at_zero(bytes_seen):
            fitted = self.moved(self.proxy_center(bytes_seen), bytes_seen)
            half = max(half, abs(self.held(bytes_seen) - fitted) / 2)
        return half

    def floor(self) -> float:
        """E of the law the prediction follows from the wider model (:attr:`from_wide`): its
        level less its size term A·N^-α and its data term B·D^-β (the fit above its floor)."""
        assert self.wide and self.horizons and self.measured_size
        fit = self.horizons.fit
        return float(self.wide.val_bpb - (fit(self.wide.bytes_seen) - fit.c)
                     - self.measured_size.slope * self.wide.params ** -WIDTH_ALPHA)

    @cached_property
    def _law_band(self) -> LawBand | None:
        if not self.from_wide or not self.seed_sd:
            return None
        assert self.wide and self.horizons and self.measured_size and self.size
        return law_band(self.horizons, self.wide, self.measured_size, self.size.target_params,
                        self.seed_sd)

    def band(self, bytes_seen: float) -> tuple[float, float]:
        """The band's low and high at ``bytes_seen``, neither below 0 val_bpb (no text is
        predicted in fewer than 0 bits). From the wider model with a measured seed noise, the
        90% of the bootstrap's draws (:mod:`~recipelab.transfer.law_band`), at least
        :data:`MIN_BAND_FRACTION` of the center on each side; otherwise the center ±
        :meth:`half_width`."""
        center = self.center(bytes_seen)
        if self._law_band is None:
            half = self.half_width(bytes_seen)
            low, high = center - half, center + half
        else:
            low, high = self._law_band.interval(bytes_seen)
            least = MIN_BAND_FRACTION * center
            low, high = min(low, center - least), max(high, center + least)
        return max(0.0, low), max(0.0, high)

    @property
    def unphysical(self) -> str | None:
        """Why the curve's fit says nothing physical beyond the fitted range, or None."""
        if self.from_wide:
            return None  # the law's caveats are in the assumptions (:meth:`_law_caveats`)
        if self.fit is not None and self.fit.bounded:
            return (f"the proxy's curve has not bent toward its floor within "
                    f"{self.last_bytes:,.0f} bytes: its best fit put the floor below 0 val_bpb, "
                    "so the fit holds it at 0, and beyond the curve the prediction is halfway "
                    "between that fit and the curve held flat at its last measurement, its band "
                    "spanning both")
        if self.fit is not None and self.fit.a == 0:
            return ("the proxy's curve does not fall over the fitted range: the prediction is its "
                    "level held flat, and a larger model trained longer may land far below it")
        return None

    def assumptions(self) -> list[str]:
        """What the prediction rests on, in words shown beside it."""
        items = self._from_wide_assumptions() if self.from_wide else [
            f"curve: the stress run {self.source_trial}'s training loss in val_bpb units "
            f"(scaled to {self.last_val_bpb:.4f} at its end), against bytes of training text",
            self.tuned.describe() if self.tuned is not None else
            "level: the stress run's measured val_bpb (no rate in its family scored lower)",
            "fit: " + (self.fit.describe().replace("t^", "bytes^") if self.fit else
                       "too few points to fit; the prediction is flat at the last measurement"),
            self.describe_size(),
            f"claim: at equal bytes of training text the target's val_bpb is the proxy's moved "
            f"by the size term; beyond {self.last_bytes:,.0f} bytes it is extrapolation",
        ]
        items += [
            "noise floor: " + (f"{self.noise_spread:.4f} val_bpb (baseline seed spread)"
                               if self.noise_spread is not None else "not measured (one baseline seed)"),
            "rank agreement: " + (f"Spearman {self.rank_agreement:+.3f} over {self.rank_pairs} "
                                  "proxy/stress pairs" if self.rank_agreement is not None
                                  else f"unknown ({self.rank_pairs} proxy/stress pair(s), needs 3)"),
            self._describe_band(),
        ]
        if self.unphysical:
            items.append(f"not physical: {self.unphysical}")
        return items

    def _describe_band(self) -> str:
        if self._law_band is None:
            rmse = self.horizons.fit.rmse if self.from_wide and self.horizons else self.fit_rmse_bpb
            return (f"band: ±max(noise floor, fit rmse {rmse or 0:.4f}, "
                    f"{MIN_BAND_FRACTION:.0%} of the value), +1 band per decade beyond the "
                    "fitted range")
        return (f"band: {CONFIDENCE:.0%} of {DRAWS:,} redraws of the horizons, the wider model "
                f"and the gap, each with the baseline's seed noise (sd {self.seed_sd:.4f} "
                f"val_bpb per seed), the data term refitted each time; at least "
                f"±{MIN_BAND_FRACTION:.0%} of the value")

    def _from_wide_assumptions(self) -> list[str]:
        assert self.wide and self.horizons and self.measured_size and self.size
        lowering = self.measured_size.lowering(self.wide.params, self.size.target_params)
        return [
            self.wide.describe(),
            self.horizons.describe(),
            f"size: {self.measured_size.describe()}; the target's {self.size.target_params:,} "
            f"non-embedding parameters put it {lowering:.4f} below the wider model's "
            f"{self.wide.params:,} at every point",
            f"claim: L(N, D) = E + A·N^-α + B·D^-β: at equal bytes of training text the "
            f"target's val_bpb is the wider model's moved along the data term and down by the "
            f"size term; beyond {self.wide.bytes_seen:,.0f} bytes it is extrapolation",
            *self._law_caveats(),
        ]

    def _law_caveats(self) -> list[str]:
        """What of the law is not physical. Said beside the prediction, not warned: at the
        small budgets of a campaign the horizons fall about log-linearly, and on
        ``bench/transfer.py`` such predictions landed within 2% at 5× the tokens. Far beyond,
        the band widens per decade and is held at 0."""
        assert self.horizons is not None
        caveats = []
        if self.horizons.fit.bounded:
            caveats.append("not physical: the recipe's best at the ladder's horizons has not bent "
                           "toward a floor: the best fit through them put it below 0 val_bpb, "
                           "so the fit holds it at 0")
        if (floor := self.floor()) < 0:
            caveats.append(f"not physical: the law's floor through the wider model, E = L − "
                           f"A·N^-α − B·D^-β, is {floor:.3f} val_bpb, below 0: far beyond the "
                           "measured sizes and text the prediction falls toward an impossible "
                           "loss, so its band is held at 0")
        return caveats

    def to_json(self) -> dict[str, object]:
        return {
            "units": "val_bpb against bytes of training text seen",
            "source_trial": self.source_trial,
            "fit": None if self.fit is None else {"a": self.fit.a, "b": self.fit.b, "c": self.fit.c,
                                                  "rmse": self.fit.rmse, "points": self.fit.points,
                                                  "bounded": self.fit.bounded},
            "unphysical": self.unphysical,
            "last_bytes": self.last_bytes, "last_val_bpb": self.last_val_bpb,
            "band_base": self.band_base, "noise_spread": self.noise_spread,
            "fit_rmse_bpb": self.fit_rmse_bpb, "rank_agreement": self.rank_agreement,
            "rank_pairs": self.rank_pairs,
            "size": self.size.to_json() if self.size is not None else None,
            "measured_size": (self.measured_size.to_json() if self.measured_size is not None
                              else None),
            "tuned": self.tuned.to_json() if self.tuned is not None else None,
            "horizons": self.horizons.to_json() if self.horizons is not None else None,
            "wide": self.wide.to_json() if self.wide is not None else None,
            "seed_sd": self.seed_sd,
            "assumptions": self.assumptions(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Prediction:
        """The prediction as :meth:`to_json` wrote it (an export's ``prediction.json``)."""
        fit, size, measured = data.get("fit"), data.get("size"), data.get("measured_size")
        tuned, data_term, wide = data.get("tuned"), data.get("horizons"), data.get("wide")
        return cls(source_trial=str(data["source_trial"]),
                   fit=None if fit is None else PowerLaw(
                       a=float(fit["a"]), b=float(fit["b"]), c=float(fit["c"]),
                       rmse=float(fit["rmse"]), points=int(fit["points"]),
                       bounded=bool(fit.get("bounded", False))),
                   last_bytes=float(data["last_bytes"]), last_val_bpb=float(data["last_val_bpb"]),
                   band_base=float(data["band_base"]), noise_spread=data.get("noise_spread"),
                   fit_rmse_bpb=data.get("fit_rmse_bpb"), rank_agreement=data.get("rank_agreement"),
                   rank_pairs=int(data.get("rank_pairs", 0)),
                   size=None if size is None else SizeTerm(int(size["proxy_params"]),
                                                           int(size["target_params"])),
                   measured_size=None if measured is None else SizeGap.from_json(measured),
                   tuned=None if tuned is None else TunedLevel(
                       float(tuned["val_bpb"]), float(tuned["multiple"]),
                       float(tuned["stress_val_bpb"]), int(tuned["seeds"])),
                   horizons=None if data_term is None else Horizons.from_json(data_term),
                   wide=None if wide is None else WideLevel.from_json(wide),
                   seed_sd=data.get("seed_sd"))


def bytes_per_token(recipe: Recipe) -> float:
    """Bytes of text per token of ``recipe``'s tokenizer: exactly 1 for bytes; for BPE it is
    measured on the corpus by ``pretrain`` (``bytes_seen`` in its metrics), so a plan made
    before the run assumes :data:`ASSUMED_BPE_BYTES_PER_TOKEN`."""
    return BYTE_TOKEN_BYTES if recipe.tokenizer == "byte" else ASSUMED_BPE_BYTES_PER_TOKEN


def _stress_of(records: Sequence[TrialRecord], trial_id: str) -> TrialRecord | None:
    found = None
    for record in records:
        if record.kind == "stress" and record.parent == trial_id and record.trained and record.curve:
            found = record
    return found


def rank_agreement(records: Sequence[TrialRecord]) -> tuple[float | None, int]:
    """Spearman between proxy val_bpb and stress final val_bpb (as the report computes it)."""
    proxies = {r.trial_id: r for r in scored_proxies(records)}
    pairs = []
    for record in records:
        if record.kind != "stress" or not record.trained or record.parent not in proxies:
            continue
        final = record.val_bpb if record.val_bpb is not None else (
            float(record.curve[-1]["loss"]) if record.curve else None)
        proxy_bpb = proxies[record.parent].val_bpb
        if final is not None and math.isfinite(final) and proxy_bpb is not None:
            pairs.append((proxy_bpb, final))
    return spearman([p[0] for p in pairs], [p[1] for p in pairs]), len(pairs)


def predict(records: Sequence[TrialRecord], winner: TrialRecord,
            target: Shape | None = None) -> Prediction:
    """The prediction for ``target`` (the proxy's own shape when None) from the winner's
    stress run, or from its own proxy curve without one."""
    run = _stress_of(records, winner.trial_id) or winner
    recipe = Recipe.model_validate(run.recipe)
    points = [p for p in run.curve if "step" in p and "loss" in p and math.isfinite(float(p["loss"]))]
    per_step = recipe.tokens_per_step * bytes_per_token(recipe)
    last_loss = float(points[-1]["loss"]) if points else None
    measured = run.val_bpb if run.val_bpb is not None else winner.val_bpb
    if measured is None or not math.isfinite(measured):
        raise ValueError(f"trial {run.trial_id} has no val_bpb to anchor a prediction on")
    tuned = tuned_level(records, winner.trial_id, run) if run is not winner else None
    if tuned is not None:
        measured = tuned.val_bpb
    # nats per token -> val_bpb: the run's own ratio (tokenizer and train/validation gap in one)
    scale = measured / last_loss if last_loss and last_loss > 0 else 1 / math.log(2)
    xs = [float(p["step"]) * per_step for p in points]
    ys = [float(p["loss"]) * scale for p in points]
    fit = fit_power_law(xs, ys)
    noise = noise_floor(records)
    rho, pairs = rank_agreement(records)
    rmse = fit.rmse if fit is not None else None
    band = max(noise.spread if noise else 0.0, rmse or 0.0)
    last_bytes = xs[-1] if xs else float(recipe.steps * per_step)
    per_budget_step = recipe.steps * per_step / run.budget_steps  # the ladder keeps tokens equal
    return Prediction(source_trial=run.trial_id, fit=fit, last_bytes=last_bytes,
                      last_val_bpb=float(measured), band_base=band,
                      noise_spread=noise.spread if noise else None, fit_rmse_bpb=rmse,
                      rank_agreement=rho, rank_pairs=pairs,
                      size=None if target is None else SizeTerm(
                          non_embedding_params(recipe.shape), non_embedding_params(target)),
                      measured_size=None if target is None else (
                          measured_gap(records, winner.trial_id) or measured_gap(records)),
                      tuned=tuned, horizons=horizons(records, winner.trial_id, per_budget_step),
                      wide=None if target is None else wide_level(
                          records, winner.trial_id, bytes_per_token(recipe)),
                      seed_sd=statistics.stdev(noise.values) if noise and len(noise.values) > 1
                      else None)
