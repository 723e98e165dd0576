"""A controlled loss spike, and the postmortem that reads it.

Batches made only of the corpus's rarest tokens are what the model has almost never had to
predict, so a few steps of them make the loss and the gradient norm jump the way a bad
data shard does. A user rehearses on a cheap run what a real spike looks like in the logs
and whether the recipe recovers from it.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import torch

RARE_TOKENS = 16
COUNT_SAMPLE_TOKENS = 50_000_000
WINDOW_BEFORE = 10
WINDOW_AFTER = 30
RECOVERY_STEPS = 5
RECOVERY_TOLERANCE = 0.10


def rarest_tokens(train: npt.NDArray[np.generic], vocab_size: int,
                  count: int = RARE_TOKENS) -> npt.NDArray[np.int64]:
    """The ``count`` least frequent token ids that occur at least once (in the first
    :data:`COUNT_SAMPLE_TOKENS` training tokens)."""
    sample = np.asarray(train[:COUNT_SAMPLE_TOKENS], dtype=np.int64)
    counts = np.bincount(sample, minlength=vocab_size)
    present = np.flatnonzero(counts)
    order = present[np.argsort(counts[present], kind="stable")]
    return order[:count].astype(np.int64)


def rare_batch(rare: npt.NDArray[np.int64], batch_size: int, seq_len: int, seed: int,
               step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch drawn uniformly from ``rare``, from ``(seed, step)`` alone (so resumable)."""
    digest = hashlib.blake2b(f"spike:{seed}:{step}".encode(), digest_size=8).digest()
    generator = torch.Generator().manual_seed(int.from_bytes(digest, "little"))
    picks = torch.randint(len(rare), (batch_size, seq_len + 1), generator=generator)
    tokens = torch.from_numpy(rare)[picks]
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


@dataclass
class SpikeTrace:
    """Per-step loss and grad norm in a window around the injected spike."""

    start: int  # the first spiked step (1-based: the step count after it)
    steps: int
    trace: list[tuple[int, float, float]] = field(default_factory=list)

    def spiked(self, step_done: int) -> bool:
        """Whether the optimizer step that makes ``step_done`` steps trains on rare tokens."""
        return self.start <= step_done < self.start + self.steps

    def watching(self, step_done: int) -> bool:
        return self.start - WINDOW_BEFORE <= step_done < self.start + self.steps + WINDOW_AFTER

    def record(self, step_done: int, loss: float, grad_norm: float) -> None:
        self.trace = [t for t in self.trace if t[0] != step_done] + [(step_done, loss, grad_norm)]

    def postmortem(self) -> str:
        before = [t for t in self.trace if t[0] < self.start]
        during = [t for t in self.trace if self.spiked(t[0])]
        after = [t for t in self.trace if t[0] >= self.start + self.steps]
        lines = [f"# Spike postmortem: rare-token batches at steps {self.start}–"
                 f"{self.start + self.steps - 1}", ""]
        if not before or not during:
            lines.append("The run ended before the spike window was observed: nothing to read.")
            return "\n".join(lines) + "\n"
        base = statistics.fmean(t[1] for t in before)
        peak = max(during, key=lambda t: t[1])
        peak_grad = max(t[2] for t in during)
        base_grad = statistics.fmean(t[2] for t in before)
        tail = after[-RECOVERY_STEPS:]
        recovered_at = next((t[0] for t in after if t[1] <= base * (1 + RECOVERY_TOLERANCE)), None)
        if not tail:
            verdict = "unknown: the run stopped before any step after the spike"
        elif not all(math.isfinite(t[1]) for t in tail):
            verdict = "no: the loss is not finite after the spike"
        elif statistics.fmean(t[1] for t in tail) <= base * (1 + RECOVERY_TOLERANCE):
            verdict = (f"yes: the loss was back within {RECOVERY_TOLERANCE:.0%} of its pre-spike mean "
                       f"at step {recovered_at}")
        else:
            verdict = (f"not yet: the mean loss of the last {len(tail)} steps watched is "
                       f"{statistics.fmean(t[1] for t in tail):.4f} against {base:.4f} before")
        lines += [f"- pre-spike mean train loss: {base:.4f}, mean grad norm {base_grad:.3f}",
                  f"- peak: loss {peak[1]:.4f} at step {peak[0]} ({peak[1] / base:.2f}× the "
                  f"pre-spike mean), grad norm up to {peak_grad:.3f} ({peak_grad / base_grad:.1f}×)",
                  f"- recovered: {verdict}", "",
                  "| step | train loss | grad norm | batch |", "|---|---|---|---|"]
        lines += [f"| {s} | {loss:.4f} | {g:.3f} | {'rare tokens' if self.spiked(s) else 'corpus'} |"
                  for s, loss, g in sorted(self.trace)]
        lines += ["", "A real spike reads the same way in metrics.csv and events.jsonl: the loss "
                  "and grad norm jump together; if the loss has not come back within a few hundred "
                  "steps, stop, resume from the checkpoint before the spike with the offending "
                  "batches skipped or a lower learning rate."]
        return "\n".join(lines) + "\n"
