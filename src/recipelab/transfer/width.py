"""The width rung: the size term of the prediction, measured instead of read from a law.

A larger model reaches a lower loss from the same text, and a proxy alone cannot say by how
much. Kaplan's law in parameters and data (:class:`~recipelab.transfer.prediction.SizeTerm`)
can, but its constants come from other data and tokenizers: ``bench/transfer.py`` found the
target 4-20% below a prediction that used it. So, after the winner is named, the campaign
trains the recommendation twice more, by the export's own rules (its rate and batch from
Step Law, the target's context up to :data:`MAX_CONTEXT`) at the top rung's tokens: on the
target's family at the proxy's width, and at :data:`WIDTH_MULTIPLE` × the width and depth
(head size and the depth-to-width ratio kept). Their two val_bpb are two points of Chinchilla's
``L(N) = E + A·N^-α`` (Hoffmann et al. 2022, arXiv 2203.15556) with α the published
:data:`WIDTH_ALPHA`; their difference sets ``A``. Chinchilla's form keeps ``A`` at every
token count, so the target's prediction is the proxy's curve less ``A·(N_proxy^-α −
N_target^-α)``, the gap the law puts between the proxy's size and the target's.

The rung also trains the baseline at twice the width, beside the recommendation: the check
one size up (:mod:`recipelab.trajectory.width_check`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from recipelab.recipe import Recipe, Shape, non_embedding_params
from recipelab.targets import Target
from recipelab.trajectory.record import TrialRecord, has_score
from recipelab.trajectory.width_check import (
    WIDTH_KIND,
    WIDTH_MULTIPLE,
    is_control,
    mean_val_bpb,
    paired_by_seed,
    rate_multiple,
    scored_width_runs,
    trial_ids,
    width_of,
)

WIDTH_ALPHA = 0.34
"""The parameter exponent of Chinchilla's loss law (Hoffmann et al. 2022, approach 3)."""
SIZE_RULE = "Chinchilla's L = E + A·N^-0.34 (Hoffmann et al. 2022, arXiv 2203.15556)"
MAX_CONTEXT = 256
"""The width rung's longest context. The gap was measured right at 256 (bench/transfer.py's
target). At 1,024 the demo's top-rung tokens made 100 steps of one sequence, and the wider
model scored worse; and at a small model's width attention over a long context costs many
times its matmuls (30 top-rung runs for the `cpu` preset's wider model at SmolLM2's 8,192)."""


def width_targets(proxy: Shape, target: Target) -> tuple[Target, Target]:
    """The two models the width rung trains: ``target``'s family (its context up to
    :data:`MAX_CONTEXT`, the proxy's vocabulary and tokenizer) at the proxy's width, and at
    :data:`WIDTH_MULTIPLE` × its width and depth."""
    def at(multiple: int) -> Target:
        shape = proxy.model_copy(update={
            "n_layer": proxy.n_layer * multiple, "n_head": proxy.n_head * multiple,
            "n_kv_head": proxy.n_kv_head * multiple, "d_model": proxy.d_model * multiple})
        return Target(f"{target.name} at {multiple}× the proxy's width", target.description,
                      shape, min(target.context, MAX_CONTEXT))
    return at(1), at(WIDTH_MULTIPLE)


@dataclass(frozen=True)
class SizeGap:
    """The val_bpb of the same recipe at two sizes and the same tokens (``narrow`` the
    proxy's width, ``wide`` twice it), each a mean over the ``seeds`` both trained, and the
    law through them."""

    narrow_params: int
    narrow_val_bpb: float
    wide_params: int
    wide_val_bpb: float
    runs: tuple[str, str]  # the runs' trial ids, narrow first (trial_ids: w0000+w0003)
    seeds: int = 1

    @property
    def slope(self) -> float:
        """``A`` of ``L = E + A·N^-α`` through the two points."""
        spread = float(self.narrow_params ** -WIDTH_ALPHA - self.wide_params ** -WIDTH_ALPHA)
        return (self.narrow_val_bpb - self.wide_val_bpb) / spread

    @property
    def measured(self) -> bool:
        """Whether the rung measured a gap: a wider model that scored no better says its run
        was too short or its rate off, not that size hurts, so it is no size term."""
        return self.slope > 0

    def lowering(self, proxy_params: int, target_params: int) -> float:
        """How much lower the law puts the target than the proxy, at equal tokens."""
        return (self.narrow_val_bpb - self.wide_val_bpb) * self.lever(proxy_params, target_params)

    def lever(self, proxy_params: int, target_params: int) -> float:
        """The law's gap between two sizes as a multiple of the measured one."""
        return float((proxy_params ** -WIDTH_ALPHA - target_params ** -WIDTH_ALPHA)
                     / (self.narrow_params ** -WIDTH_ALPHA - self.wide_params ** -WIDTH_ALPHA))

    def describe(self) -> str:
        seeds = "" if self.seeds == 1 else f", means of {self.seeds} seeds"
        return (f"{SIZE_RULE}, A = {self.slope:.4g} from the width rung: the recommendation at "
                f"{self.narrow_params:,} non-embedding parameters scored {self.narrow_val_bpb:.4f} "
                f"({self.runs[0]}) and at {self.wide_params:,} {self.wide_val_bpb:.4f} "
                f"({self.runs[1]}), at the same tokens{seeds}")

    def to_json(self) -> dict[str, object]:
        return {"rule": SIZE_RULE, "alpha": WIDTH_ALPHA, "slope": self.slope, "seeds": self.seeds,
                "narrow": {"params": self.narrow_params, "val_bpb": self.narrow_val_bpb,
                           "trial": self.runs[0]},
                "wide": {"params": self.wide_params, "val_bpb": self.wide_val_bpb,
                         "trial": self.runs[1]}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SizeGap:
        narrow, wide = data["narrow"], data["wide"]
        return cls(int(narrow["params"]), float(narrow["val_bpb"]), int(wide["params"]),
                   float(wide["val_bpb"]), (str(narrow["trial"]), str(wide["trial"])),
                   int(data.get("seeds", 1)))


def measured_gap(records: Sequence[TrialRecord], parent: str | None = None) -> SizeGap | None:
    """The size gap from ``parent``'s scored width runs at both sizes (the recommendation's
    latest when None; the baseline's are its controls), same budget and seed, averaged over
    the seeds with both; None before the width rung has a pair."""
    scored = [r for r in scored_width_runs(records)
              if (r.parent == parent if parent is not None else not is_control(r))]
    paired = paired_by_seed(scored, scored, lambda narrow, wide: narrow.parent == wide.parent
                            and width_of(narrow) * WIDTH_MULTIPLE == width_of(wide))
    if paired is None:
        return None
    narrows, wides = paired
    sizes = [Recipe.model_validate(runs[0].recipe).shape for runs in (narrows, wides)]
    return SizeGap(non_embedding_params(sizes[0]), mean_val_bpb(narrows),
                   non_embedding_params(sizes[1]), mean_val_bpb(wides),
                   (trial_ids(narrows), trial_ids(wides)), len(narrows))


@dataclass(frozen=True)
class WideLevel:
    """The recipe at the width rung's wider size, at the best of the rates it trained there
    (each a mean over its seeds). Of every model the campaign trained it is the closest to
    the target: the largest, at the target's context and by the export's own rules, where
    the proxy's stress run trains at the proxy's context (a 2-layer × 64 model scored 0.3
    val_bpb worse at 256 than at 64 in bench/transfer.py)."""

    params: int
    val_bpb: float
    multiple: float  # its rate over the export's
    bytes_seen: float  # of text, at its end
    runs: str  # their trial ids

    def describe(self) -> str:
        return (f"level: the recipe at {self.params:,} non-embedding parameters, the width "
                f"rung's wider model, at {self.multiple:g}× the export's rate, the best it "
                f"trained there: {self.val_bpb:.4f} at {self.bytes_seen:,.0f} bytes ({self.runs})")

    def to_json(self) -> dict[str, object]:
        return {"params": self.params, "val_bpb": self.val_bpb, "multiple": self.multiple,
                "bytes_seen": self.bytes_seen, "runs": self.runs}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WideLevel:
        return cls(int(data["params"]), float(data["val_bpb"]), float(data["multiple"]),
                   float(data["bytes_seen"]), str(data["runs"]))


def wide_level(records: Sequence[TrialRecord], parent: str, bytes_per_token: float
               ) -> WideLevel | None:
    """``parent``'s scored width runs at the widest size they reached, at their best rate;
    None when the rung trained it at one size or none."""
    runs = [r for r in records if r.kind == WIDTH_KIND and has_score(r) and r.parent == parent]
    if len({width_of(r) for r in runs}) < 2:
        return None
    widest = max(width_of(r) for r in runs)
    by_rate: dict[float, list[TrialRecord]] = {}
    for run in runs:
        if width_of(run) == widest:
            by_rate.setdefault(rate_multiple(run), []).append(run)
    multiple, chosen = min(by_rate.items(), key=lambda item: mean_val_bpb(item[1]))
    recipe = Recipe.model_validate(chosen[0].recipe)
    return WideLevel(non_embedding_params(recipe.shape), mean_val_bpb(chosen), multiple,
                     recipe.steps * recipe.tokens_per_step * bytes_per_token, trial_ids(chosen))
