"""The long run: one recipe trained for hours, on one process or many, watched as it goes.

Built on the trial trainer's parts (the model, data, evaluation and checkpoints), with what a
billed cloud run needs on top:

- ``torchrun`` and PyTorch DDP (gloo on CPU, NCCL on CUDA). The recipe's batch
  (``batch_size × grad_accum`` sequences) is the *global* batch: every rank draws the same
  global micro-batch from ``(seed, step)`` and trains on its own rows of it, so a 2-process
  run follows the 1-process curve with the same global batch;
- checkpoints of model and optimizer (safetensors, written atomically by rank 0, the newest
  K kept) and ``--resume-from-latest``, which continues the uninterrupted curve exactly: the
  schedule and the batches are functions of the step, and the metrics rows and the partial
  logging interval are in the checkpoint;
- a budget guard (:mod:`recipelab.longrun.budget`), a throughput floor, and an injected
  loss spike with its postmortem (:mod:`recipelab.longrun.spike`);
- ``metrics.csv``, plots, ``final.safetensors``, ``manifest.json`` and structlog events in
  ``events.jsonl``.

Rank 0 decides every stop and broadcasts it, so all ranks leave the loop at the same step.
"""

from __future__ import annotations

import csv
import fcntl
import json
import math
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

import structlog
import torch
import torch.distributed as dist
import torch.nn.functional as F
from pydantic import Field
from safetensors.torch import save_model
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from recipelab.fsutil import atomic_write_text
from recipelab.longrun.budget import BudgetGuard, BudgetStatus, read_elapsed, write_budget
from recipelab.longrun.spike import SpikeTrace, rare_batch, rarest_tokens
from recipelab.recipe import Recipe, StrictModel
from recipelab.trainer import checkpoint
from recipelab.trainer.data import Dataset, load_dataset, sample_batch
from recipelab.trainer.device import (
    autocast,
    check_precision,
    configure_device,
    configure_threads,
    linear_factory,
    provenance,
    synchronize,
)
from recipelab.trainer.evaluate import bits_per_byte
from recipelab.trainer.loop import build_optimizer
from recipelab.trainer.model import GPT
from recipelab.trainer.spec import CorpusSpec

METRICS_FILE = "metrics.csv"
EVENTS_FILE = "events.jsonl"
MANIFEST_FILE = "manifest.json"
FINAL_FILE = "final.safetensors"
POSTMORTEM_FILE = "spike-postmortem.md"
CHECKPOINT_DIR = "checkpoints"
LOCK_FILE = ".lock"
METRIC_COLUMNS = ("step", "tokens", "bytes_seen", "train_loss", "val_bpb", "grad_norm",
                  "param_norm", "lr", "tokens_per_s", "mfu", "usd_spent", "elapsed_h")
CUDA_PEAK_FLOPS = 989e12  # H100 SXM dense BF16: the default peak on CUDA for MFU
TIMED_WARMUP_STEPS = 2
EXIT_BUDGET = 3

StopReason = Literal["complete", "budget_projection", "budget_spent"]


class PretrainConfig(StrictModel):
    """Everything one long run is given."""

    recipe: Recipe
    out_dir: str
    corpus: CorpusSpec = CorpusSpec()
    device: Literal["auto", "cpu", "cuda"] = "auto"
    campaign: str = "pretrain"
    log_every: int = Field(default=10, ge=1)
    eval_every: int = Field(default=100, ge=1)
    ckpt_every: int = Field(default=100, ge=0)
    keep_last: int = Field(default=3, ge=1)
    resume_from_latest: bool = False
    price_per_hour: float = Field(default=0.0, ge=0)
    budget_cap_usd: float | None = Field(default=None, gt=0)
    alert_at_usd: float | None = Field(default=None, ge=0)
    dry_run_budget: bool = False
    dry_run_steps: int = Field(default=5, ge=2)
    min_mfu: float | None = Field(default=None, gt=0, le=1)
    min_tokens_per_s: float | None = Field(default=None, gt=0)
    peak_tflops: float | None = Field(default=None, gt=0)
    inject_spike_at_step: int | None = Field(default=None, ge=1)
    spike_steps: int = Field(default=3, ge=1)
    threads: int | None = Field(default=None, ge=1)


@dataclass
class PretrainResult:
    stop_reason: StopReason
    steps_done: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    budget: BudgetStatus | None = None


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int

    @property
    def main(self) -> bool:
        return self.rank == 0


@contextmanager
def distributed(device: str) -> Iterator[tuple[World, torch.device]]:
    """The process group of a ``torchrun`` launch (none for a plain process)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    target = torch.device(f"cuda:{local}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(target)
    if size > 1:
        dist.init_process_group("nccl" if cuda else "gloo")
    try:
        yield World(rank, size, local), target
    finally:
        if size > 1 and dist.is_initialized():
            dist.destroy_process_group()


class Events:
    """structlog JSON lines in ``events.jsonl`` (rank 0), one readable line on stderr."""

    def __init__(self, path: Path | None, campaign: str, run: str, console: TextIO) -> None:
        self._file = path.open("a", encoding="utf-8") if path is not None else None
        self.console = console
        self.log = structlog.wrap_logger(
            structlog.WriteLogger(self._file) if self._file else structlog.ReturnLogger(),
            processors=[structlog.processors.add_log_level,
                        structlog.processors.TimeStamper(fmt="iso", utc=True),
                        structlog.processors.JSONRenderer()],
        ).bind(campaign=campaign, run=run)

    def emit(self, event: str, level: str = "info", **fields: Any) -> None:
        if self._file is None:
            return
        getattr(self.log, level)(event, **fields)
        self._file.flush()
        shown = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in fields.items())
        print(f"[{level}] {event} {shown}", file=self.console, flush=True)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class RunLocked(ValueError):
    """Another process is writing to the run directory."""


@contextmanager
def run_lock(out: Path) -> Iterator[None]:
    """An exclusive lock on ``out`` for as long as a run writes to it.

    torchrun starts its workers in sessions of their own, so killing the launcher can leave
    a rank 0 training on; a resume into the same directory would then interleave two runs'
    metrics and checkpoints. The lock (``flock``, released by the kernel when its holder
    dies, however it dies) refuses the second run instead.
    """
    path = out / LOCK_FILE
    handle = path.open("a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "a process"
            raise RunLocked(
                f"{holder} is still writing to {out}: stop it (torchrun's workers too; they "
                "outlive a killed launcher) before resuming, or give another --out") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pretrain pid {os.getpid()} on {socket.gethostname()}")
        handle.flush()
        yield
    finally:
        handle.close()


def _all_mean(value: torch.Tensor, world: World) -> torch.Tensor:
    if world.size > 1:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        value /= world.size
    return value


def _decide(code: int, world: World) -> int:
    """Rank 0's decision, the same on every rank."""
    if world.size == 1:
        return code
    flag = torch.tensor([code], dtype=torch.int64)
    dist.broadcast(flag, 0)
    return int(flag.item())


def _param_norm(model: nn.Module) -> float:
    return math.sqrt(sum(float(p.detach().float().norm()) ** 2 for p in model.parameters()))


class LongRun:
    """One invocation of a long run (a resume is another invocation of the same run)."""

    def __init__(self, config: PretrainConfig, world: World, device: torch.device,
                 console: TextIO = sys.stderr) -> None:
        self.config, self.world, self.device = config, world, device
        self.recipe = config.recipe
        self.out = Path(config.out_dir)
        if world.main:
            self.out.mkdir(parents=True, exist_ok=True)
        self.events = Events(self.out / EVENTS_FILE if world.main and not config.dry_run_budget
                             else None, config.campaign, self.out.name, console)
        self.rows: list[dict[str, Any]] = []
        self.spike = (SpikeTrace(config.inject_spike_at_step, config.spike_steps)
                      if config.inject_spike_at_step else None)

    # --- setup ---------------------------------------------------------------------------

    def _data(self) -> Dataset:
        recipe = self.recipe

        def load() -> Dataset:
            return load_dataset(self.config.corpus, tokenizer=recipe.tokenizer,
                                vocab_size=recipe.shape.vocab_size, eval_bytes=recipe.eval_bytes,
                                min_train_tokens=recipe.batch_size * recipe.seq_len + 1)

        if self.world.size == 1:
            return load()
        data = load() if self.world.main else None  # rank 0 builds the cache, the rest read it
        dist.barrier()
        return data if data is not None else load()

    def _peak_flops(self) -> float | None:
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
        config, recipe, world = self.config, self.recipe, self.world
        if recipe.batch_size % world.size:
            raise ValueError(
                f"batch_size {recipe.batch_size} does not split over {world.size} processes: "
                f"use a batch_size that is a multiple of {world.size} (--set batch_size=N)")
        guard = BudgetGuard(config.price_per_hour, config.budget_cap_usd, config.alert_at_usd,
                            recipe.steps, read_elapsed(self.out) if config.resume_from_latest
                            and not config.dry_run_budget else 0.0)
        threads = config.threads
        if threads is None and self.device.type == "cpu" and world.size > 1:
            # one OpenMP pool of every core per process would make the ranks fight for cores
            local = int(os.environ.get("LOCAL_WORLD_SIZE", str(world.size)))
            threads = max(1, (os.cpu_count() or 1) // local)
        configure_threads(threads)
        configure_device(self.device)
        check_precision(recipe.precision, self.device)
        torch.manual_seed(recipe.seed)
        data = self._data()
        model = GPT(recipe.shape, recipe.seq_len, linear_factory(recipe.precision)).to(self.device)
        optimizer = build_optimizer(model, recipe, self.device)
        context = autocast(recipe.precision, self.device)
        interval = torch.zeros((), device=self.device)
        grad_max = torch.zeros((), device=self.device)
        interval_steps = 0
        start = 0
        root = self.out / CHECKPOINT_DIR
        if config.resume_from_latest and not config.dry_run_budget:
            state = checkpoint.load(root, model, optimizer)
            if state is not None:
                start = state.step
                self.rows = state.extra["rows"]
                interval.fill_(state.extra["interval_sum"])
                grad_max.fill_(state.extra["grad_max"])
                interval_steps = int(state.extra["interval_steps"])
                if self.spike is not None:
                    self.spike.trace = [(int(s), float(v), float(g))
                                        for s, v, g in state.extra.get("spike", [])]
        forward: nn.Module = (DistributedDataParallel(model) if world.size > 1 else model)
        bytes_per_token = float(data.tokenizer.token_bytes[data.eval_tokens].mean())
        rare = (rarest_tokens(data.train, recipe.shape.vocab_size) if self.spike is not None
                else None)
        peak = self._peak_flops()
        flops_per_token = recipe.flops_per_token()
        if world.main and not config.dry_run_budget:
            self._rewrite_metrics()  # a new run's header, or the rows of the checkpoint resumed
        self.events.emit("pretrain_start", params=model.param_count(), world_size=world.size,
                         device=str(self.device), steps=recipe.steps, resumed_from=start or None,
                         tokens_per_step=recipe.tokens_per_step, data=data.description)
        clip = recipe.optimizer.grad_clip or math.inf
        params = [p for p in model.parameters() if p.requires_grad]
        vocab = recipe.shape.vocab_size
        rows_per_rank = recipe.batch_size // world.size
        mine = slice(world.rank * rows_per_rank, (world.rank + 1) * rows_per_rank)
        timed_from = start + TIMED_WARMUP_STEPS
        last_log = (time.perf_counter(), start)
        below_floor = False
        stop: StopReason = "complete"
        steps_done = start
        end = min(recipe.steps, start + config.dry_run_steps) if config.dry_run_budget else recipe.steps
        for step in range(start, end):
            if step == timed_from:
                synchronize(self.device)
                guard.start_timing(step)
                last_log = (time.perf_counter(), step)
            lr = recipe.optimizer.lr * recipe.schedule.lr_multiplier(step, recipe.steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            spiked = self.spike is not None and self.spike.spiked(step + 1)
            step_loss = torch.zeros((), device=self.device)
            for micro in range(recipe.grad_accum):
                index = step * recipe.grad_accum + micro
                if spiked:
                    assert rare is not None
                    x, y = rare_batch(rare, recipe.batch_size, recipe.seq_len, recipe.seed, index)
                else:
                    x, y = sample_batch(data.train, recipe.batch_size, recipe.seq_len,
                                        recipe.seed, index)
                x, y = x[mine].to(self.device), y[mine].to(self.device)
                sync = (forward.no_sync() if isinstance(forward, DistributedDataParallel)
                        and micro < recipe.grad_accum - 1 else nullcontext())
                with sync:  # DDP all-reduces the gradients on the last micro-batch only
                    with context():
                        logits = forward(x)
                    loss = F.cross_entropy(logits.float().view(-1, vocab), y.view(-1))
                    (loss / recipe.grad_accum).backward()  # type: ignore[no-untyped-call]
                step_loss += loss.detach() / recipe.grad_accum
            grad_norm = torch.nn.utils.clip_grad_norm_(params, clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            interval += step_loss
            torch.maximum(grad_max, grad_norm.detach(), out=grad_max)
            interval_steps += 1
            steps_done = step + 1
            if self.spike is not None and self.spike.watching(steps_done):
                loss_now = float(_all_mean(step_loss.clone(), world))
                self.spike.record(steps_done, loss_now, float(grad_norm))
            if config.dry_run_budget:
                continue
            status = guard.status(steps_done)
            if _decide(1 if world.main and guard.spent_over_cap(status) else 0, world):
                stop = "budget_spent"
                self.events.emit("budget_stop", level="error", step=steps_done,
                                 spent_usd=status.spent_usd, cap_usd=config.budget_cap_usd,
                                 how="immediately, without a checkpoint: spending passed the cap")
                if world.main:
                    write_budget(self.out, status, stop)
                break
            log_now = steps_done % config.log_every == 0 or steps_done == recipe.steps
            eval_now = steps_done % config.eval_every == 0 or steps_done == recipe.steps
            if log_now or eval_now:
                row = self._row(steps_done, recipe, bytes_per_token, lr, status)
                if log_now:
                    mean = _all_mean(interval.clone(), world) / interval_steps
                    now = time.perf_counter()
                    measured = steps_done - last_log[1]
                    tokens_per_s = (measured * recipe.tokens_per_step / (now - last_log[0])
                                    if steps_done > timed_from and measured > 0 else None)
                    last_log = (now, steps_done)
                    mfu = (flops_per_token * tokens_per_s / (peak * world.size)
                           if tokens_per_s is not None and peak else None)
                    row.update(train_loss=float(mean), grad_norm=float(grad_max),
                               param_norm=_param_norm(model), tokens_per_s=tokens_per_s, mfu=mfu)
                    interval.zero_()
                    grad_max.zero_()
                    interval_steps = 0
                    below_floor = self._throughput_floor(steps_done, tokens_per_s, mfu, below_floor)
                if eval_now:
                    row["val_bpb"] = self._evaluate(model, data, context)
                self._append(row)
                if log_now and world.main:
                    write_budget(self.out, status)
                    self.events.emit("step", step=steps_done, loss=row.get("train_loss"),
                                     val_bpb=row.get("val_bpb"), usd_spent=status.spent_usd)
                    if guard.alert_due(status):
                        self.events.emit("budget_alert", level="warning", step=steps_done,
                                         spent_usd=status.spent_usd, alert_at_usd=config.alert_at_usd,
                                         projected_total_usd=status.projected_total_usd)
            projected_over = log_now and world.main and guard.projected_over_cap(status)
            if _decide(1 if projected_over else 0, world):
                self._checkpoint(model, optimizer, steps_done, interval, grad_max, interval_steps)
                stop = "budget_projection"
                status = guard.status(steps_done)
                self.events.emit("budget_stop", level="error", step=steps_done,
                                 projected_total_usd=status.projected_total_usd,
                                 cap_usd=config.budget_cap_usd, spent_usd=status.spent_usd,
                                 how="gracefully, after a checkpoint: the projection exceeds the "
                                     "cap; raise --budget-cap-usd and --resume-from-latest to go on")
                if world.main:
                    write_budget(self.out, status, stop)
                break
            if config.ckpt_every and steps_done % config.ckpt_every == 0:
                self._checkpoint(model, optimizer, steps_done, interval, grad_max, interval_steps)
        synchronize(self.device)
        final = guard.status(steps_done)
        if config.dry_run_budget:
            return PretrainResult("complete", steps_done, budget=final)
        if world.main:
            self._finish(model, final, stop, steps_done)
        if world.size > 1:
            dist.barrier()
        self.events.close()
        return PretrainResult(stop, steps_done, self.rows, final)

    # --- pieces of a step ------------------------------------------------------------------

    def _row(self, step: int, recipe: Recipe, bytes_per_token: float, lr: float,
             status: BudgetStatus) -> dict[str, Any]:
        tokens = step * recipe.tokens_per_step
        return {"step": step, "tokens": tokens, "bytes_seen": round(tokens * bytes_per_token),
                "lr": lr, "usd_spent": status.spent_usd, "elapsed_h": status.elapsed_s / 3600}

    def _evaluate(self, model: nn.Module, data: Dataset,
                  context: Callable[[], AbstractContextManager[Any]]) -> float | None:
        """val_bpb on the held-out slice, computed by rank 0 while the others wait."""
        score = None
        if self.world.main:
            score = bits_per_byte(model, data.eval_tokens, data.tokenizer.token_bytes,
                                  self.recipe.seq_len, self.recipe.batch_size, self.device,
                                  context).bpb
        if self.world.size > 1:
            dist.barrier()
        return score

    def _throughput_floor(self, step: int, tokens_per_s: float | None, mfu: float | None,
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

    def _append(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if self.world.main:
            with (self.out / METRICS_FILE).open("a", newline="") as handle:
                csv.DictWriter(handle, METRIC_COLUMNS, restval="").writerow(row)

    def _rewrite_metrics(self) -> None:
        """metrics.csv as of the checkpoint resumed from (rows logged after it are re-run)."""
        with (self.out / METRICS_FILE).open("w", newline="") as handle:
            writer = csv.DictWriter(handle, METRIC_COLUMNS, restval="")
            writer.writeheader()
            writer.writerows(self.rows)

    def _checkpoint(self, model: nn.Module, optimizer: torch.optim.Optimizer, step: int,
                    interval: torch.Tensor, grad_max: torch.Tensor, interval_steps: int) -> None:
        # Every rank holds the global mean of the partial interval from here on, so a resume
        # (which loads rank 0's copy on every rank) sums exactly what this run would.
        _all_mean(interval, self.world)
        if self.world.main:
            extra = {"rows": self.rows, "interval_sum": float(interval),
                     "grad_max": float(grad_max), "interval_steps": interval_steps,
                     "spike": self.spike.trace if self.spike else []}
            checkpoint.save(self.out / CHECKPOINT_DIR, step, model, optimizer, extra,
                            keep=self.config.keep_last)
            self.events.emit("checkpoint", step=step)
        if self.world.size > 1:
            dist.barrier()

    def _finish(self, model: nn.Module, status: BudgetStatus, stop: StopReason,
                steps_done: int) -> None:
        from recipelab.longrun.plots import write_plots

        if stop == "complete":
            save_model(model, str(self.out / FINAL_FILE))
        if stop != "budget_spent":
            write_budget(self.out, status, stop)
        write_plots(self.rows, self.out)
        if self.spike is not None:
            (self.out / POSTMORTEM_FILE).write_text(self.spike.postmortem())
        info = provenance(self.device, self.recipe.seed)
        manifest = {
            "campaign": self.config.campaign, "recipe_fingerprint": self.recipe.fingerprint(),
            "recipe": self.recipe.model_dump(mode="json"), "steps_done": steps_done,
            "total_steps": self.recipe.steps, "stop_reason": stop, "world_size": self.world.size,
            "spent_usd": status.spent_usd, "elapsed_s": status.elapsed_s,
            "provenance": info.model_dump(), "corpus": self.config.corpus.model_dump(),
            "final": FINAL_FILE if stop == "complete" else None,
        }
        atomic_write_text(self.out / MANIFEST_FILE, json.dumps(manifest, indent=2) + "\n")
        self.events.emit("pretrain_end", stop_reason=stop, steps_done=steps_done,
                         spent_usd=status.spent_usd)


def run_pretrain(config: PretrainConfig, console: TextIO = sys.stderr) -> PretrainResult:
    """Run ``config`` in this process, as one rank of a ``torchrun`` launch when there is one."""
    with distributed(config.device) as (world, device):
        return LongRun(config, world, device, console).run()


def dry_run_report(config: PretrainConfig, result: PretrainResult) -> dict[str, Any]:
    """The projection ``--dry-run-budget`` prints, from the steps it measured."""
    status = result.budget
    assert status is not None
    per_step = status.seconds_per_step
    hours = per_step * config.recipe.steps / 3600 if per_step is not None else None
    projected = hours * config.price_per_hour if hours is not None else None
    return {"measured_steps": result.steps_done, "seconds_per_step": per_step,
            "total_steps": config.recipe.steps, "projected_hours": hours,
            "price_per_hour": config.price_per_hour, "projected_total_usd": projected,
            "budget_cap_usd": config.budget_cap_usd,
            "over_cap": (projected is not None and config.budget_cap_usd is not None
                         and projected > config.budget_cap_usd)}
