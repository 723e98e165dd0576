"""The trials in flight: handed to the executor, polled, and recorded when they end.

:class:`TrialBook` is the campaign's only writer of records. It keeps the records as the
store has them (re-read once after each write, the agent being the store's only writer) and
the trials in flight, and it turns each executor result into the record's final state:
metrics, provenance, the stress verdict, the gain over the noise floor, and the memory model
the guardrails use, which learns each trial's measured peak.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from recipelab.agent.memory_updates import learn_peak
from recipelab.agent.phases.seeds import noise_marks
from recipelab.agent.phases.stress import judge_stress
from recipelab.agent.records import agent_provenance, result_fields
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.guardrails import DeviceInfo
from recipelab.guardrails.memory_fit import MemoryModel, memory_model_path, read_for_guardrail
from recipelab.recipe import BASELINE_PROPOSER, Recipe
from recipelab.runner import Executor, TrialHandle
from recipelab.trainer.spec import TrialResult
from recipelab.trajectory import TrajectoryStore
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import TrialRecord, utc_now

TRIALS_DIR = "trials"


def trial_folder(record: TrialRecord) -> str:
    """Where ``record``'s files are, relative to the campaign directory (recorded at launch)."""
    return str(record.artifacts.get("dir", f"{TRIALS_DIR}/{record.trial_id}"))


@dataclass
class GuardrailMemory:
    """The memory model the guardrails are handed: read once when the campaign starts, then
    replaced by the file as written each time a completed trial adds its peak."""

    path: Path
    model: MemoryModel | None
    problem: str | None  # why the file could not be used, when it could not

    @classmethod
    def read(cls) -> GuardrailMemory:
        path = memory_model_path()
        return cls(path, *read_for_guardrail(path))


@dataclass
class InFlight:
    """A trial handed to the executor whose result has not come back yet."""

    record: TrialRecord
    recipe: Recipe
    handle: TrialHandle
    started: float  # time.monotonic() at submission, for the record's wall_s


class TrialBook:
    """Records and in-flight trials of one campaign (see the module)."""

    def __init__(self, settings: CampaignSettings, directory: Path, store: TrajectoryStore,
                 executor: Executor, device: DeviceInfo, memory: GuardrailMemory, log: Any,
                 on_change: Callable[[], None] = lambda: None,
                 on_record: Callable[[TrialRecord], None] = lambda record: None) -> None:
        self.settings = settings
        self.directory = directory
        self.store = store
        self.executor = executor
        self.device = device
        self.log = log
        self.on_change = on_change  # e.g. refresh the progress display
        self.on_record = on_record  # each record of an ended trial, once written (MLflow)
        self.inflight: dict[str, InFlight] = {}
        self.memory = memory
        self._ledger: Ledger | None = None

    @property
    def ledger(self) -> Ledger:
        """The records as a :class:`Ledger`, read from the store once per change."""
        if self._ledger is None:
            self._ledger = self.settings.ladder.ledger(self.store.records())
        return self._ledger

    def write(self, record: TrialRecord, say: Callable[[], object] = lambda: None) -> None:
        """Store ``record``, then ``say`` its event, then (for an ended trial) hand it to
        ``on_record``: in that order, so the live report's last lines include its event."""
        if record.status == "running":
            self.store.mark_running(record)
        else:
            self.store.append(record)
        self._ledger = None
        say()
        if record.is_terminal:
            self.on_record(record)

    def proxies_in_flight(self) -> int:
        return sum(f.record.kind == "proxy" for f in self.inflight.values())

    def running(self) -> str | None:
        return ", ".join(f"{f.record.trial_id} ({f.record.kind})"
                         for f in self.inflight.values()) or None

    def launch(self, record: TrialRecord, recipe: Recipe, *, log_every: int, timeout_s: float,
               checkpoint_every: int = 0, resume: bool = False, out_dir: Path | None = None) -> None:
        """Mark ``record`` running and hand it to the executor; :meth:`poll` records its result."""
        out_dir = out_dir or self.directory / TRIALS_DIR / record.trial_id
        spec = self.settings.trial_spec(record.trial_id, record.kind, recipe, out_dir,
                                        log_every=log_every, checkpoint_every=checkpoint_every)
        record.artifacts = {**record.artifacts, "dir": str(out_dir.relative_to(self.directory))}
        record.started_at = utc_now()
        record.status = "running"
        self.write(record)
        self.log.info("trial_started", trial_id=record.trial_id, kind=record.kind,
                      steps=record.steps, tokens=record.tokens, seed=recipe.seed,
                      parent=record.parent, proposer=record.proposer, edit=record.edit,
                      hypothesis=record.hypothesis)
        started = time.monotonic()
        handle = self.executor.submit(spec, resume=resume, timeout_s=timeout_s)
        self.inflight[record.trial_id] = InFlight(record, recipe, handle, started)
        self.on_change()
        self.executor.prestart()

    def poll(self, *, cancel: bool = False) -> list[TrialRecord]:
        """Record every trial in flight that has ended; with ``cancel``, stop them all and
        record them as ``interrupted``."""
        finished = []
        for trial_id, flight in list(self.inflight.items()):
            if cancel:
                self.executor.cancel(flight.handle)
                self.executor.poll(flight.handle)
                del self.inflight[trial_id]
                finished.append(self.finish(flight.record, status="interrupted",
                                            message="cancelled by a second stop signal"))
                continue
            result = self.executor.poll(flight.handle)
            if result is not None:
                del self.inflight[trial_id]
                finished.append(self._record_result(flight, result))
        return finished

    def _record_result(self, flight: InFlight, result: TrialResult) -> TrialRecord:
        record, recipe = flight.record, flight.recipe
        fields = result_fields(result, recipe, time.monotonic() - flight.started,
                               agent_provenance(self.device, recipe.seed))
        if result.status == "interrupted":
            self.log.warning("trial_lost", trial_id=record.trial_id, kind=record.kind,
                             message=result.message)
        elif record.kind == "stress":
            verdict = judge_stress(fields["curve"], result.reason)
            fields["verdict"] = verdict.verdict
            fields["message"] = result.message or verdict.explanation
            self.log.info("stress_verdict", trial_id=record.trial_id, parent=record.parent,
                          verdict=verdict.verdict, explanation=verdict.explanation)
        elif record.kind == "proxy" and record.proposer != BASELINE_PROPOSER:
            fields["metrics"].update(noise_marks(fields["val_bpb"], self.ledger.noise, recipe.seed))
        return self.finish(record, **fields)

    def finish(self, record: TrialRecord, **fields: Any) -> TrialRecord:
        final = record.model_copy(update={**fields, "finished_at": utc_now()})
        final = TrialRecord.model_validate(final.model_dump())
        if (learnt := learn_peak(final, self.device, self.log, self.memory.path)) is not None:
            self.memory.model, self.memory.problem = learnt, None
        self.write(final, say=partial(
            self.log.info, "trial_finished", trial_id=final.trial_id, kind=final.kind,
            steps=final.steps, tokens=final.tokens, status=final.status, reason=final.reason,
            val_bpb=final.val_bpb, message=final.message, wall_s=final.measured.wall_s))
        self.on_change()
        return final
