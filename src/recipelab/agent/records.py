"""Conversions between what the agent works with and what the trajectory stores."""

from __future__ import annotations

import platform
import socket
from typing import Any

from recipelab.guardrails import DeviceInfo, Measurement
from recipelab.proposer import Observation, Proposal
from recipelab.recipe import Recipe, flatten
from recipelab.trainer.spec import TrialResult, code_version
from recipelab.trajectory.record import TrialRecord

RESULT_METRICS = ("train_loss", "tokens_per_s", "step_ms", "peak_memory_bytes", "params",
                  "setup_s", "train_s", "eval_s", "steps_done", "resumed_from_step",
                  "val_bpb_stderr", "losses", "node")


def agent_provenance(device: DeviceInfo, seed: int) -> dict[str, Any]:
    """What the orchestrator knows of where a trial ran, for trials that report nothing."""
    return {"device": f"{device.kind}:{device.name}", "host": socket.gethostname(),
            "code_version": code_version(), "python": platform.python_version(),
            "seed": seed}


def result_fields(result: TrialResult, recipe: Recipe, wall_s: float,
                  fallback_provenance: dict[str, Any]) -> dict[str, Any]:
    """The record fields a trial's result fills in."""
    metrics = {name: getattr(result, name) for name in RESULT_METRICS}
    if result.eval_blocks is not None:
        metrics["eval_blocks"] = result.eval_blocks.model_dump()
    metrics.update(wall_s=wall_s, tokens_per_step=recipe.tokens_per_step,
                   flops_per_token=recipe.flops_per_token(), steps=recipe.steps)
    if result.telemetry is not None:
        metrics["telemetry"] = result.telemetry.model_dump()
    provenance = (result.provenance.model_dump() if result.provenance is not None
                  else fallback_provenance)
    return {
        "status": result.status, "reason": result.reason, "message": result.message,
        "val_bpb": result.val_bpb, "metrics": metrics, "provenance": provenance,
        "curve": [point.model_dump() for point in result.curve],
    }


def proposal_fields(proposal: Proposal) -> dict[str, Any]:
    return {"edit": proposal.edit, "parent": proposal.parent_id, "proposer": proposal.proposer,
            "hypothesis": proposal.hypothesis}


def as_proposal(record: TrialRecord) -> Proposal:
    """The proposal behind a recorded trial, to run its candidate again."""
    return Proposal(candidate=record.recipe, edit=record.edit, parent_id=record.parent,
                    hypothesis=record.hypothesis, proposer=record.proposer)


def as_observation(record: TrialRecord) -> Observation:
    # A record's recipe is already the dumped Recipe, so flattening it gives Recipe.knobs()
    # without validating every past trial again on every iteration.
    knobs = flatten(record.recipe) if record.fingerprint else {}
    return Observation(trial_id=record.trial_id, status=record.status, knobs=knobs,
                       val_bpb=record.val_bpb, reason=record.reason,
                       reasons=tuple(record.reasons), proposer=record.proposer,
                       hypothesis=record.hypothesis)


def as_measurement(record: TrialRecord) -> Measurement | None:
    """A completed trial as evidence for the memory and time models, when it has the figures."""
    m = record.measured
    if (record.status != "complete" or m.params is None or m.tokens_per_step is None
            or m.flops_per_token is None or m.tokens_per_s is None
            or m.peak_memory_bytes is None or m.wall_s is None or m.steps is None):
        return None
    return Measurement(params=m.params, tokens_per_step=m.tokens_per_step,
                       flops_per_token=m.flops_per_token, tokens_per_s=m.tokens_per_s,
                       peak_memory_bytes=m.peak_memory_bytes, wall_s=m.wall_s, steps=m.steps,
                       recipe=Recipe.model_validate(record.recipe))
