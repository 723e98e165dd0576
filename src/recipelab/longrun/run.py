"""The long run: one recipe trained for hours, on one process or many, watched as it goes.

The steps are the trainer's own (:mod:`recipelab.trainer.core`: the model from the whole
recipe, the optimizer groups with their multipliers, the step with z-loss, accumulation and
clipping, the schedule), so a 1-process long run makes exactly the losses of
``recipelab train``. Around that core, and never inside it, what a billed cloud run needs:

- ``torchrun`` and PyTorch DDP (gloo on CPU, NCCL on CUDA), or FSDP2 where a whole copy
  does not fit a GPU (:mod:`recipelab.longrun.sharding`). The recipe's batch
  (``batch_size × grad_accum`` sequences) is the *global* batch: every rank draws the same
  global micro-batch from ``(seed, step)`` and trains on its own rows of it, so a 2-process
  run follows the 1-process curve. The data is tokenized before the process group starts
  (one process per node builds the cache while the others wait on its lock), and every
  collective obeys its backend's device rule (:mod:`recipelab.longrun.distributed`);
- checkpoints of model and optimizer (safetensors, written atomically by rank 0; sharded,
  by every rank through ``torch.distributed.checkpoint``; the newest K kept) and
  ``--resume-from-latest``, which continues the uninterrupted curve exactly;
- stops that every rank agrees on at the same step: SIGTERM (a preempted node) checkpoints
  and exits 143 for the watchdog to resume; a non-finite or diverged loss stops with exit 4,
  the newest checkpoint being the last one whose loss was checked; the budget
  (:mod:`recipelab.longrun.budget`) stops with exit 3;
- a throughput floor (its windows leave out evaluation and checkpoint time), an injected
  loss spike with its postmortem (:mod:`recipelab.longrun.spike`);
- ``metrics.csv`` (wide) and ``metrics-long.csv`` (step, name, value), plots,
  ``final.safetensors``, ``manifest.json``, structlog events in ``events.jsonl`` and, with
  ``--mlflow-uri``, an MLflow run.
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, TextIO

import torch
from safetensors.torch import save_model
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from recipelab.cores import usable_cores
from recipelab.errors import RecipelabError
from recipelab.fsutil import atomic_write_text
from recipelab.longrun import sharding
from recipelab.longrun.budget import (
    BudgetGuard,
    BudgetStatus,
    budget_action,
    read_elapsed,
    write_budget,
)
from recipelab.longrun.cluster import cluster_info
from recipelab.longrun.distributed import Collectives, World, process_group, world_from_env
from recipelab.longrun.mlflow_log import LongRunTracking
from recipelab.longrun.pretrain_config import (
    CHECKPOINT_DIR,
    CHECKPOINTED_STOPS,
    EVENTS_FILE,
    FINAL_FILE,
    MANIFEST_FILE,
    METRICS_FILE,
    METRICS_LONG_FILE,
    POSTMORTEM_FILE,
    STOP_CODES,
    PretrainConfig,
    PretrainResult,
    StopReason,
)
from recipelab.longrun.run_process import Events, run_lock, sigterm_flag
from recipelab.longrun.spike import SpikeTrace, rare_batch, rarest_tokens
from recipelab.tracking import TrackingUnavailable, check_tracking_uri
from recipelab.trainer import checkpoint
from recipelab.trainer.batches import sample_batch
from recipelab.trainer.core import build_model, build_optimizer
from recipelab.trainer.data import Dataset, load_dataset
from recipelab.trainer.device import (
    autocast,
    check_precision,
    configure_device,
    configure_threads,
    maybe_compile,
    provenance,
    synchronize,
)
from recipelab.trainer.evaluate import shard_sums
from recipelab.trainer.spec import CHECKPOINT_LATEST
from recipelab.trainer.step_loop import Interval, Step, Stepper, run_steps

METRIC_COLUMNS = ("step", "tokens", "bytes_seen", "train_loss", "val_loss", "val_bpb",
                  "grad_norm", "param_norm", "lr", "tokens_per_s", "mfu", "usd_spent", "elapsed_h")
CUDA_PEAK_FLOPS = 989e12  # H100 SXM dense BF16: the default peak on CUDA for MFU
TIMED_WARMUP_STEPS = 2


def _param_norm(model: nn.Module, comm: Collectives, sharded: bool) -> float:
    """The parameters' L2 norm: each rank's shares summed over the ranks when sharded."""
    squares = sharding.local_square_sum(model)
    if sharded:
        squares = comm.sum(squares.to(comm.device)).cpu()
    return math.sqrt(float(squares))


class LongRunHooks:
    """What a long run does after each step: the spike rehearsal's trace, a metrics row every
    ``log_every`` (throughput, MFU, the budget's status) and ``eval_every`` (val_bpb), the stop
    every rank agrees on (budget, SIGTERM, divergence), a checkpoint every
    ``checkpoint_every``. A dry run only takes the steps."""

    def __init__(self, run: LongRun, model: nn.Module, optimizer: torch.optim.Optimizer,
                 context: Callable[[], AbstractContextManager[Any]], interval: Interval,
                 guard: BudgetGuard, *, start: int, writes: bool, preempted: list[bool]) -> None:
        self.run, self.model, self.optimizer, self.interval = run, model, optimizer, interval
        self.context = context
        self.guard, self.writes, self.preempted = guard, writes, preempted
        recipe, device = run.recipe, run.device
        self.limit = run.config.divergence_factor * math.log(recipe.shape.vocab_size)
        self.bytes_per_token = float(run.data.tokenizer.token_bytes[run.data.eval_tokens].mean())
        self.flops_per_token = recipe.flops_per_token()
        self.peak = run.peak_flops()
        self.trouble = torch.zeros((), dtype=torch.bool, device=device)  # a NaN or a blow-up
        self.timed_from = start + TIMED_WARMUP_STEPS
        self.last_log = (time.perf_counter(), start)  # when and at which step the last row
        self.below_floor = self.stale = False
        self.stop: StopReason = "complete"

    def timing_starts(self, step: int) -> None:
        self.guard.start_timing(step)
        self.last_log = (time.perf_counter(), step)
        self.run.paused_s = 0.0

    def after(self, step: Step) -> bool:
        run, config, done = self.run, self.run.config, step.done
        spike = run.spike
        watched = spike is not None and spike.watching(done)
        self.trouble |= ~torch.isfinite(step.loss)
        if not watched:  # a rehearsed spike is meant to jump; only a NaN counts there
            self.trouble |= step.loss > self.limit
        if spike is not None and watched:
            spike.record(done, float(run.comm.mean(step.loss.clone())), float(step.grad_norm))
        if not self.writes:
            return False
        if spike is not None and done == spike.start:
            run.rehearsal_started(done)
        status = self.guard.status(done)
        log_now = done % config.log_every == 0 or done == run.recipe.steps
        eval_now = done % config.eval_every == 0 or done == run.recipe.steps
        ckpt_now = bool(config.checkpoint_every) and done % config.checkpoint_every == 0
        if log_now or eval_now:
            row = run.row(done, self.bytes_per_token, step.lr, status)
            if log_now:
                row.update(self._train_metrics(done))
            if eval_now:
                row.update(run.evaluate(self.model, self.context))
            run.append(row)
            if log_now and run.world.main:
                write_budget(run.out, status)
                self.stale = run.watch_spend(done, status, self.guard, self.stale)
        self.stop = run.decide(done, status, self.preempted[0], log_now, ckpt_now, self.trouble)
        if self.stop != "complete":
            return True
        if ckpt_now:
            run.save_checkpoint(self.model, self.optimizer, done, self.interval)
        return False

    def _train_metrics(self, done: int) -> dict[str, Any]:
        """The interval's mean loss over every rank, its largest gradient norm, throughput and
        MFU since the last row (evaluation and checkpoints left out); the interval restarts."""
        run, interval = self.run, self.interval
        mean = run.comm.mean(interval.loss_sum.clone()) / interval.steps
        now = time.perf_counter()
        measured = done - self.last_log[1]
        window = now - self.last_log[0] - run.paused_s
        tokens_per_s = (measured * run.recipe.tokens_per_step / window
                        if done > self.timed_from and measured > 0 and window > 0 else None)
        self.last_log, run.paused_s = (now, done), 0.0
        mfu = (self.flops_per_token * tokens_per_s / (self.peak * run.world.size)
               if tokens_per_s is not None and self.peak else None)
        metrics = {"train_loss": float(mean), "grad_norm": float(interval.grad_max),
                   "param_norm": _param_norm(self.model, run.comm, run.sharded),
                   "tokens_per_s": tokens_per_s, "mfu": mfu}
        interval.reset()
        self.below_floor = run.throughput_floor(done, tokens_per_s, mfu, self.below_floor)
        return metrics


def has_checkpoint(out: Path) -> bool:
    return (out / CHECKPOINT_DIR / CHECKPOINT_LATEST).exists()


class LongRun:
    """One invocation of a long run (a resume is another invocation of the same run)."""

    def __init__(self, config: PretrainConfig, comm: Collectives, device: torch.device,
                 data: Dataset, console: TextIO | None = None) -> None:
        """``console`` is standard error when None, read at the call (a default argument
        would keep the stream of the module's import, which a test runner may have closed)."""
        console = console if console is not None else sys.stderr
        self.config, self.comm, self.world, self.device = config, comm, comm.world, device
        self.data = data
        self.recipe = config.recipe
        self.out = Path(config.out_dir)
        if self.world.main:
            self.out.mkdir(parents=True, exist_ok=True)
        self.events = Events(self.out / EVENTS_FILE if self.world.main and not config.dry_run_budget
                             else None, config.campaign, self.out.name, console)
        self.rows: list[dict[str, Any]] = []
        self.spike = (SpikeTrace(config.inject_spike_at_step, config.spike_steps)
                      if config.inject_spike_at_step else None)
        self.paused_s = 0.0  # evaluation and checkpoint time inside the current log window
        self.sharded = False  # set once the model is built (sharding.resolve)
        self.tracking = (LongRunTracking(check_tracking_uri(config.mlflow_uri), config.campaign,
                                         self.out, self.events.emit)
                         if config.mlflow_uri and self.world.main and not config.dry_run_budget
                         else None)

    def peak_flops(self) -> float | None:
        if self.config.peak_tflops is not None:
            return self.config.peak_tflops * 1e12
        return CUDA_PEAK_FLOPS if self.device.type == "cuda" else None

    # --- the run -------------------------------------------------------------------------

    def run(self) -> PretrainResult:
        """Train, holding the run directory's lock on rank 0 (a dry run writes nothing)."""
        if not self.world.main or self.config.dry_run_budget:
            return self._run()
        with run_lock(self.out):
            return self._run()

    def _run(self) -> PretrainResult:
        config, recipe, world, data = self.config, self.recipe, self.world, self.data
        writes = not config.dry_run_budget
        guard = config.budget_guard(read_elapsed(self.out) if writes else 0.0)
        torch.manual_seed(recipe.seed)
        model = build_model(recipe, self.device)
        self.sharded, why_sharded = sharding.resolve(config.sharding, recipe, world, self.device)
        if self.sharded:
            sharding.shard_model(model, recipe.precision)
        optimizer = build_optimizer(model, recipe, self.device)
        context = autocast(recipe.precision, self.device)
        interval = Interval.zeros(self.device)
        start = self._restore(model, optimizer, interval) if config.resume_from_latest and writes else 0
        ddp = DistributedDataParallel(model) if world.size > 1 and not self.sharded else None
        compile_model = (config.compile if config.compile is not None
                         else self.device.type == "cuda" and not self.sharded)
        rare = (rarest_tokens(data.train, recipe.shape.vocab_size) if self.spike is not None
                else None)
        if world.main and writes:
            self._rewrite_metrics()  # a new run's header, or the rows of the checkpoint resumed
        self.events.emit("pretrain_start", params=model.param_count(), world_size=world.size,
                         device=str(self.device), steps=recipe.steps, resumed_from=start or None,
                         tokens_per_step=recipe.tokens_per_step, data=data.description,
                         spend_source=guard.status(start).source, compiled=compile_model,
                         sharded=self.sharded, sharding=why_sharded)
        if self.tracking is not None:
            self.tracking.params({"recipe": recipe.model_dump(mode="json"),
                                  "corpus": config.corpus.source})
        rows_per_rank = recipe.batch_size // world.size
        mine = slice(world.rank * rows_per_rank, (world.rank + 1) * rows_per_rank)

        def batch(index: int) -> tuple[torch.Tensor, torch.Tensor]:
            step_done = index // recipe.grad_accum + 1
            if self.spike is not None and self.spike.spiked(step_done):
                assert rare is not None
                x, y = rare_batch(rare, recipe.batch_size, recipe.seq_len, recipe.seed, index)
            else:
                x, y = sample_batch(data.train, recipe.batch_size, recipe.seq_len, recipe.seed,
                                    index)
            return x[mine].to(self.device), y[mine].to(self.device)

        stepper = Stepper(maybe_compile(ddp if ddp is not None else model, compile_model),
                          optimizer, [p for p in model.parameters() if p.requires_grad], recipe,
                          batch, context, ddp.no_sync if ddp is not None else None)
        end = min(recipe.steps, start + config.dry_run_steps) if not writes else recipe.steps
        with sigterm_flag() as preempted:
            hooks = LongRunHooks(self, model, optimizer, context, interval, guard, start=start,
                                 writes=writes, preempted=preempted)
            steps_done = run_steps(stepper, interval, self.device, start=start, end=end,
                                   timed_from=start + TIMED_WARMUP_STEPS, hooks=hooks)
            if hooks.stop in CHECKPOINTED_STOPS:
                self.save_checkpoint(model, optimizer, steps_done, interval)
        synchronize(self.device)
        final = guard.status(steps_done)
        if not writes:
            return PretrainResult("complete", steps_done, budget=final)
        if hooks.stop != "complete":
            self._announce_stop(hooks.stop, steps_done, final)
        whole = (sharding.whole_state(model) if self.sharded and hooks.stop == "complete"
                 else None)  # every rank gathers
        if world.main:
            self._finish(model, final, hooks.stop, steps_done, whole)
        self.comm.barrier()
        self.events.close()
        return PretrainResult(hooks.stop, steps_done, self.rows, final)

    def _restore(self, model: nn.Module, optimizer: torch.optim.Optimizer,
                 interval: Interval) -> int:
        """The step the latest checkpoint holds (0 without one), its model, optimizer, rows,
        partial interval and spike trace loaded."""
        root = self.out / CHECKPOINT_DIR
        state = (sharding.load(root, model, optimizer, self.world) if self.sharded
                 else checkpoint.load(root, model, optimizer))
        if state is None:
            return 0
        self.rows = state.extra["rows"]
        interval.loss_sum.fill_(state.extra["interval_sum"])
        interval.grad_max.fill_(state.extra["grad_max"])
        interval.steps = int(state.extra["interval_steps"])
        if self.spike is not None:
            self.spike.trace = [(int(s), float(v), float(g))
                                for s, v, g in state.extra.get("spike", [])]
        return state.step

    def rehearsal_started(self, step: int) -> None:
        """Say that the rare-token batches of ``--inject-spike-at-step`` start now."""
        assert self.spike is not None
        self.events.emit("spike_rehearsal", level="warning", step=step, steps=self.spike.steps,
                         how="rare-token batches injected on purpose (--inject-spike-at-step); "
                             "not a real spike")
        if self.tracking is not None:
            self.tracking.tag("recipelab.spike_rehearsal",
                              f"steps {step}-{step + self.spike.steps - 1}")

    # --- decisions -----------------------------------------------------------------------

    def decide(self, step: int, status: BudgetStatus, preempted: bool, log_now: bool,
                ckpt_now: bool, trouble: torch.Tensor) -> StopReason:
        """The stop every rank agrees on after ``step`` ("complete": go on)."""
        asked: StopReason = "preempted" if preempted else "complete"
        if self.world.main:
            action = budget_action(status)
            if action == "stop_at_once":
                asked = "budget_spent"
            elif action == "stop_after_checkpoint" and log_now:
                asked = max(asked, "budget_projection", key=STOP_CODES.index)
        if (log_now or ckpt_now) and bool(trouble):  # read only where the host waits anyway
            asked = max(asked, "diverged", key=STOP_CODES.index)
        return STOP_CODES[self.comm.agree(STOP_CODES.index(asked))]

    def _announce_stop(self, stop: StopReason, step: int, status: BudgetStatus) -> None:
        cap = self.config.budget_cap_usd
        if stop == "budget_spent":
            self.events.emit("budget_stop", level="error", step=step, spent_usd=status.spent_usd,
                             cap_usd=cap, how="immediately, without a checkpoint: spending "
                             "passed the cap")
        elif stop == "budget_projection":
            self.events.emit("budget_stop", level="error", step=step,
                             projected_total_usd=status.projected_total_usd, cap_usd=cap,
                             spent_usd=status.spent_usd,
                             how="gracefully, after a checkpoint: the projection exceeds the "
                                 "cap; raise --budget-cap-usd and --resume-from-latest to go on")
        elif stop == "preempted":
            self.events.emit("preempted", level="warning", step=step,
                             how="SIGTERM: checkpointed; run the same command with "
                                 "--resume-from-latest to continue")
        else:
            latest = self.out / CHECKPOINT_DIR / CHECKPOINT_LATEST
            newest = latest.read_text().strip() if latest.exists() else None
            self.events.emit("diverged", level="error", step=step, last_good_checkpoint=newest,
                             how="the loss became non-finite or exceeded "
                                 f"{self.config.divergence_factor} × ln(vocab); resume from the "
                                 "last good checkpoint with a lower learning rate or tighter "
                                 "clipping (--set optimizer.lr=... --resume-from-latest)")

    def watch_spend(self, step: int, status: BudgetStatus, guard: BudgetGuard,
                     stale: bool) -> bool:
        """Events for the alert level and a sidecar that stopped updating (once each time)."""
        if guard.alert_due(status):
            self.events.emit("budget_alert", level="warning", step=step,
                             spent_usd=status.spent_usd, alert_at_usd=self.config.alert_at_usd,
                             projected_total_usd=status.projected_total_usd)
        now_stale = status.stale_s is not None or status.problem is not None
        if now_stale and not stale:
            self.events.emit("budget_stale", level="warning", step=step, age_s=status.stale_s,
                             problem=status.problem, spent_usd=status.spent_usd,
                             how="the spend file is not being updated: the guard acts on the "
                                 "last figures it read; check the sidecar")
        return now_stale

    # --- pieces of a step ------------------------------------------------------------------

    def row(self, step: int, bytes_per_token: float, lr: float,
             status: BudgetStatus) -> dict[str, Any]:
        tokens = step * self.recipe.tokens_per_step
        return {"step": step, "tokens": tokens, "bytes_seen": round(tokens * bytes_per_token),
                "lr": lr, "usd_spent": status.spent_usd, "elapsed_h": status.elapsed_s / 3600}

    @contextmanager
    def _paused(self) -> Iterator[None]:
        """Time spent here is left out of the throughput window."""
        synchronize(self.device)
        began = time.perf_counter()
        try:
            yield
        finally:
            synchronize(self.device)
            self.paused_s += time.perf_counter() - began

    def evaluate(self, model: nn.Module,
                  context: Callable[[], AbstractContextManager[Any]]) -> dict[str, float]:
        """val_bpb and val loss (nats/token) on the held-out slice, each rank scoring its
        share of the evaluation batches."""
        with self._paused():
            sums = shard_sums(model, self.data.eval_tokens, self.data.tokenizer.token_bytes,
                              self.recipe.seq_len, self.recipe.batch_size, self.device, context,
                              self.world.rank, self.world.size, lockstep=self.sharded)
            nats, n_bytes, tokens = self.comm.sum(sums.to(self.comm.device)).tolist()
        return {"val_bpb": nats / (math.log(2) * n_bytes), "val_loss": nats / tokens}

    def throughput_floor(self, step: int, tokens_per_s: float | None, mfu: float | None,
                          below: bool) -> bool:
        """Emit an event when throughput falls below the floor (once per fall)."""
        config = self.config
        low = ((config.min_tokens_per_s is not None and tokens_per_s is not None
                and tokens_per_s < config.min_tokens_per_s)
               or (config.min_mfu is not None and mfu is not None and mfu < config.min_mfu))
        if low and not below:
            self.events.emit("throughput_below_floor", level="warning", step=step,
                             tokens_per_s=tokens_per_s, mfu=mfu, min_mfu=config.min_mfu,
                             min_tokens_per_s=config.min_tokens_per_s,
                             hint="stop and diagnose (data loader, interconnect, a slow node, "
                                  "thermal throttling) before the bill grows")
        return low

    def append(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if self.world.main:
            with (self.out / METRICS_FILE).open("a", newline="") as handle:
                csv.DictWriter(handle, METRIC_COLUMNS, restval="").writerow(row)
            with (self.out / METRICS_LONG_FILE).open("a", newline="") as handle:
                csv.writer(handle).writerows(_long_rows(row))
            if self.tracking is not None:
                self.tracking.row(row)

    def _rewrite_metrics(self) -> None:
        """The metrics files as of the checkpoint resumed from (rows logged after it are
        re-run)."""
        with (self.out / METRICS_FILE).open("w", newline="") as handle:
            writer = csv.DictWriter(handle, METRIC_COLUMNS, restval="")
            writer.writeheader()
            writer.writerows(self.rows)
        with (self.out / METRICS_LONG_FILE).open("w", newline="") as handle:
            long = csv.writer(handle)
            long.writerow(("step", "name", "value"))
            for row in self.rows:
                long.writerows(_long_rows(row))

    def save_checkpoint(self, model: nn.Module, optimizer: torch.optim.Optimizer, step: int,
                    interval: Interval) -> None:
        with self._paused():
            # Every rank holds the global mean of the partial interval from here on, so a
            # resume (which loads rank 0's copy on every rank) sums exactly what this run would.
            self.comm.mean(interval.loss_sum)
            extra = {"rows": self.rows, "interval_sum": float(interval.loss_sum),
                     "grad_max": float(interval.grad_max), "interval_steps": interval.steps,
                     "spike": self.spike.trace if self.spike else []}
            root = self.out / CHECKPOINT_DIR
            if self.sharded:  # every rank writes its shards
                sharding.save(root, step, model, optimizer, extra, self.config.keep_last,
                              self.comm)
            elif self.world.main:
                checkpoint.save(root, step, model, optimizer, extra, keep=self.config.keep_last)
            if self.world.main:
                self.events.emit("checkpoint", step=step)
            self.comm.barrier()

    def _finish(self, model: nn.Module, status: BudgetStatus, stop: StopReason,
                steps_done: int, whole: dict[str, torch.Tensor] | None = None) -> None:
        """Rank 0's last files; ``whole`` is a sharded model's gathered state."""
        from recipelab.longrun.run_plots import PLOT_FILES, write_plots

        if stop == "complete":
            if whole is not None:  # the same file an unsharded run writes
                model = build_model(self.recipe, torch.device("cpu"))
                model.load_state_dict(whole)
            save_model(model, str(self.out / FINAL_FILE))
        write_budget(self.out, status, stop)
        write_plots(self.rows, self.out)
        if self.spike is not None:
            (self.out / POSTMORTEM_FILE).write_text(self.spike.postmortem())
        info = provenance(self.device, self.recipe.seed)
        manifest = {
            "campaign": self.config.campaign, "recipe_fingerprint": self.recipe.fingerprint(),
            "recipe": self.recipe.model_dump(mode="json"), "steps_done": steps_done,
            "total_steps": self.recipe.steps, "stop_reason": stop, "world_size": self.world.size,
            "spent_usd": status.spent_usd, "spend_source": status.source,
            "elapsed_s": status.elapsed_s, "provenance": info.model_dump(),
            "corpus": self.config.corpus.model_dump(),
            "cluster": cluster_info(self.world.size, self.device),
            "final": FINAL_FILE if stop == "complete" else None,
        }
        atomic_write_text(self.out / MANIFEST_FILE, json.dumps(manifest, indent=2) + "\n")
        if self.tracking is not None:
            self.tracking.finish(stop, [self.out / name for name in (
                MANIFEST_FILE, METRICS_FILE, METRICS_LONG_FILE, POSTMORTEM_FILE, *PLOT_FILES)])
        self.events.emit("pretrain_end", stop_reason=stop, steps_done=steps_done,
                         spent_usd=status.spent_usd)


def _long_rows(row: dict[str, Any]) -> list[tuple[Any, str, Any]]:
    """A wide metrics row as (step, name, value) rows, one per value measured."""
    return [(row["step"], name, row[name]) for name in METRIC_COLUMNS[1:]
            if row.get(name) not in (None, "")]


def _load_data(config: PretrainConfig) -> Dataset:
    recipe = config.recipe
    return load_dataset(config.corpus, tokenizer=recipe.tokenizer,
                        vocab_size=recipe.shape.vocab_size, eval_bytes=recipe.eval_bytes,
                        min_train_tokens=recipe.batch_size * recipe.seq_len + 1)


def _device(world: World, requested: str) -> torch.device:
    cuda = requested == "cuda" or (requested == "auto" and torch.cuda.is_available())
    if not cuda:
        return torch.device("cpu")
    device = torch.device("cuda", world.local_rank)
    torch.cuda.set_device(device)
    return device


class StartRefused(RecipelabError, ValueError):
    """A long run refused before anything is built; the message says what to change."""


def check_start(config: PretrainConfig, world: World) -> None:
    """Refuse, before anything is built, what would fail or lose work later (each refusal a
    :class:`~recipelab.errors.RecipelabError`, so the CLI tells it from a bug in training)."""
    recipe, out = config.recipe, Path(config.out_dir)
    if recipe.batch_size % world.size:
        raise StartRefused(
            f"batch_size {recipe.batch_size} does not split over {world.size} processes: "
            f"use a batch_size that is a multiple of {world.size} (--set batch_size=N)")
    sharding.refuse(config.sharding, recipe, world)
    config.budget_guard()
    if config.mlflow_uri:
        try:
            check_tracking_uri(config.mlflow_uri)
        except TrackingUnavailable as error:
            raise StartRefused(str(error)) from None
    if not config.resume_from_latest and not config.dry_run_budget and has_checkpoint(out):
        raise StartRefused(
            f"{out} holds checkpoints of an earlier run: add --resume-from-latest to continue "
            "it, or give another --out for a new run")


def run_pretrain(config: PretrainConfig, console: TextIO | None = None) -> PretrainResult:
    """Run ``config`` in this process, as one rank of a ``torchrun`` launch when there is one.

    The data is loaded before the process group starts, so tokenizing a large corpus never
    races a collective's timeout.
    """
    world = world_from_env()
    check_start(config, world)
    device = _device(world, config.device)
    threads = config.threads
    if threads is None and device.type == "cpu" and world.size > 1:
        # one OpenMP pool of every core per process would make the ranks fight for cores
        threads = max(1, usable_cores() // world.local_size)
    configure_threads(threads)
    configure_device(device)
    check_precision(config.recipe.precision, device)
    data = _load_data(config)
    with process_group(world, device) as comm:
        return LongRun(config, comm, device, data, console).run()
