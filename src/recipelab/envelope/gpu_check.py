"""``recipelab gpu-check``: what a user runs on a GPU box and sends back.

Two checks, each in real subprocesses of the ``recipelab`` command, as a user would run them:

1. **Proxy trials** (``recipelab train``): the proxy in bf16, where this device runs bf16
   natively (else in fp32, saying why), and in fp8 where the guardrails find an sm_89+ GPU
   with TransformerEngine (else a skipped row with their reasons). The ``tiny`` preset on
   the CPU, the ``cpu`` preset on a GPU. Each row: precision, steps, val_bpb and tokens/s.
2. **A long run killed and resumed** (``recipelab pretrain`` under
   ``python -m torch.distributed.run --standalone``): on every local GPU with NCCL, or as 2
   processes with gloo on the CPU; 30 steps, a checkpoint every 10; SIGTERM to the launcher
   once the first checkpoint is written, then ``--resume-from-latest`` to step 30. The row
   says at which step it was killed, how it went (a run that catches SIGTERM writes a
   checkpoint on its way out; one that does not just dies: both are accepted, and the row
   says which happened), the step it resumed from, the final val_bpb, and whether the
   metrics of the resumed run hold every step exactly once.

The result is one table and ``gpu-check.json`` (with :func:`~recipelab.longrun.cluster.cluster_info`:
driver, CUDA, cuDNN, NCCL, GPUs), which is what a user sends back.
"""

from __future__ import annotations

import csv
import fcntl
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from rich.table import Table

from recipelab import __version__
from recipelab.guardrails.base import DeviceInfo, GuardContext
from recipelab.guardrails.hardware import check_hardware, resolve_device
from recipelab.longrun.cluster import cluster_info
from recipelab.longrun.pretrain_config import (
    CHECKPOINT_DIR,
    EVENTS_FILE,
    MANIFEST_FILE,
    METRICS_FILE,
)
from recipelab.longrun.run_process import LOCK_FILE
from recipelab.recipe import Precision, Recipe
from recipelab.targets import preset_target, proxy_recipe
from recipelab.trainer.spec import CHECKPOINT_LATEST, RESULT_FILE, TrialResult

REPORT_FILE = "gpu-check.json"
PRETRAIN_STEPS = 30
CHECKPOINT_EVERY = 10
EVAL_EVERY = 10
CPU_PROCESSES = 2
POLL_S = 0.01
STOP_GRACE_S = 120.0  # torchrun gives its workers 30 s after SIGTERM before SIGKILL
UNLOCK_WAIT_S = 60.0
DEFAULT_TIMEOUT_S = 1800.0

Status = Literal["passed", "failed", "skipped"]
Progress = Callable[[str], None]


@dataclass
class TrialCheck:
    """One proxy trial of the check, in one precision."""

    precision: str
    preset: str
    status: Status
    steps: int | None = None
    val_bpb: float | None = None
    tokens_per_s: float | None = None
    note: str | None = None  # why it was skipped, failed, or ran in another precision


@dataclass
class ResumeCheck:
    """The long run killed after its first checkpoint and resumed to the end."""

    world_size: int
    backend: str
    precision: str
    status: Status = "failed"
    killed_at_step: int | None = None  # the last step the killed run logged
    checkpoint_at_signal: int | None = None  # the newest checkpoint when SIGTERM was sent
    launcher_exit: int | None = None  # torchrun's exit status after SIGTERM
    how_it_stopped: str | None = None
    resumed_from: int | None = None
    final_steps: int | None = None
    final_val_bpb: float | None = None
    tokens_per_s: float | None = None
    every_step_once: bool = False
    note: str | None = None  # what went wrong, and where its log is


@dataclass
class GpuCheckReport:
    device: str
    device_name: str
    trials: list[TrialCheck]
    pretrain: ResumeCheck
    cluster: dict[str, object] = field(default_factory=dict)
    recipelab: str = __version__
    finished_at: str = ""

    @property
    def passed(self) -> bool:
        """Every check that ran passed (a skipped one, fp8 without an FP8 GPU, is no failure)."""
        return (all(t.status != "failed" for t in self.trials)
                and self.pretrain.status == "passed")

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, **asdict(self)}


@dataclass(frozen=True)
class Launcher:
    """How the check starts ``recipelab`` subprocesses: which Python, environment, corpus,
    CPU threads per process, and how long one run may take."""

    corpus: str = "python-docs"
    threads: int | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    python: str = sys.executable
    env: Mapping[str, str] | None = None

    def recipelab(self, *args: str) -> list[str]:
        return [self.python, "-m", "recipelab", *args]

    def torchrun(self, processes: int, *args: str) -> list[str]:
        return [self.python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                str(processes), "-m", "recipelab", *args]

    def thread_args(self) -> list[str]:
        return [] if self.threads is None else ["--threads", str(self.threads)]

    def environment(self) -> dict[str, str]:
        return {**(os.environ if self.env is None else self.env), "PYTHONUNBUFFERED": "1"}


# --- the proxy trials --------------------------------------------------------------------


def check_preset(device: DeviceInfo) -> str:
    """``tiny`` on the CPU (seconds), ``cpu`` on a GPU (a shape FP8 GEMMs accept)."""
    return "cpu" if device.kind == "cuda" else "tiny"


def trial_plan(device: DeviceInfo, preset: str) -> list[tuple[Precision | None, str, str | None]]:
    """``(precision to train or None to skip, the precision asked, why not as asked)``."""
    base = proxy_recipe(preset)
    context = GuardContext(target=preset_target(preset), baseline=base, device=device,
                           param_budget=0)
    plan: list[tuple[Precision | None, str, str | None]] = []
    bf16 = check_hardware(base.apply({"precision": "bf16"}), context)
    plan.append(("fp32", "bf16", " ".join(bf16)) if bf16 else ("bf16", "bf16", None))
    fp8 = check_hardware(base.apply({"precision": "fp8"}), context)
    plan.append((None, "fp8", " ".join(fp8)) if fp8 else ("fp8", "fp8", None))
    return plan


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def run_trial(out: Path, preset: str, precision: Precision, device: str,
              launcher: Launcher) -> TrialCheck:
    """``recipelab train`` of the preset's proxy in ``precision``; its result as a row."""
    recipe = proxy_recipe(preset).apply({"precision": precision})
    directory = out / f"trial-{precision}"
    recipe_file = out / f"trial-{precision}.json"
    recipe_file.write_text(recipe.model_dump_json())
    log = out / f"trial-{precision}.log"
    command = launcher.recipelab("train", "--recipe", str(recipe_file), "--out", str(directory),
                                 "--corpus", launcher.corpus, "--device", device,
                                 *launcher.thread_args())
    row = TrialCheck(precision=precision, preset=preset, status="failed")
    try:
        with log.open("w") as handle:
            subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, check=False,
                           env=launcher.environment(), timeout=launcher.timeout_s)
    except subprocess.TimeoutExpired:
        row.note = f"no result within {launcher.timeout_s:.0f} s; see {log}"
        return row
    try:
        result = TrialResult.model_validate_json((directory / RESULT_FILE).read_text())
    except (OSError, ValueError):
        row.note = f"recipelab train wrote no result: {_tail(log)} (log: {log})"
        return row
    row.steps, row.val_bpb, row.tokens_per_s = result.steps_done, result.val_bpb, result.tokens_per_s
    if result.status == "complete":
        row.status = "passed"
    else:
        row.note = (f"{result.status} ({result.reason}): {result.message or ''} "
                    f"(log: {directory})").strip()
    return row


def run_trials(out: Path, device: DeviceInfo, requested: str, launcher: Launcher,
               progress: Progress) -> list[TrialCheck]:
    preset = check_preset(device)
    rows = []
    for precision, asked, why in trial_plan(device, preset):
        if precision is None:
            rows.append(TrialCheck(precision=asked, preset=preset, status="skipped", note=why))
            continue
        progress(f"training the {preset} proxy in {precision}…")
        row = run_trial(out, preset, precision, requested, launcher)
        if why is not None:
            row.note = f"{asked} not run: {why}" + (f"; {row.note}" if row.note else "")
        rows.append(row)
    return rows


# --- the long run, killed and resumed ----------------------------------------------------


def stop_reason(run: Path) -> str | None:
    """How the run's last invocation ended, from its manifest (None before it wrote one)."""
    try:
        return str(json.loads((run / MANIFEST_FILE).read_text())["stop_reason"])
    except (OSError, ValueError, KeyError):
        return None


def pretrain_recipe(device: DeviceInfo, processes: int) -> Recipe:
    """A small recipe for the long-run check: the trials' preset, 30 steps, bf16 on a GPU
    that has it (else fp32), and a global batch that splits evenly over the processes."""
    base = proxy_recipe(check_preset(device))
    precision: Precision = "bf16" if device.kind == "cuda" and device.native_bf16 else "fp32"
    batch = -(-base.batch_size // processes) * processes
    return base.apply({"steps": PRETRAIN_STEPS, "precision": precision, "batch_size": batch})


def latest_checkpoint(run: Path) -> int | None:
    """The step of the newest complete checkpoint of a long run (``step-NNNNNNNN``)."""
    try:
        name = (run / CHECKPOINT_DIR / CHECKPOINT_LATEST).read_text().strip()
        return int(name.rsplit("-", 1)[1])
    except (OSError, ValueError, IndexError):
        return None


def read_metrics(run: Path) -> list[dict[str, str]]:
    try:
        with (run / METRICS_FILE).open(newline="") as handle:
            return list(csv.DictReader(handle))
    except OSError:
        return []


def read_events(run: Path) -> list[dict[str, Any]]:
    events = []
    try:
        lines = (run / EVENTS_FILE).read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by the kill
    return events


def _number(value: object) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _stop(process: subprocess.Popen[bytes]) -> int:
    """SIGTERM to the launcher, as a cloud scheduler stops a job; SIGKILL if it hangs."""
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def wait_unlocked(run: Path, timeout_s: float = UNLOCK_WAIT_S) -> bool:
    """Wait until no process holds the run directory's lock (torchrun's workers can outlive
    their launcher); False when one still does after ``timeout_s``."""
    path = run / LOCK_FILE
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with path.open("a") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        except OSError:
            return True  # no lock file: nobody ever held it


def how_it_stopped(exit_status: int, at_signal: int | None, after: int | None,
                   last_event: str | None) -> str:
    """What happened to a run sent SIGTERM, in words, from what it left behind."""
    if exit_status < 0:
        launcher = f"torchrun died of signal {-exit_status}"
    else:
        launcher = f"torchrun exited with status {exit_status}"
    if after is not None and (at_signal is None or after > at_signal):
        return (f"{launcher}; the run wrote a checkpoint at step {after} on its way out "
                f"(last event: {last_event})")
    return (f"{launcher}; the run stopped without a checkpoint of its own, so the resume "
            f"repeats the steps after {at_signal} (last event: {last_event})")


def run_pretrain_check(out: Path, device: DeviceInfo, requested: str, launcher: Launcher,
                       processes: int, progress: Progress) -> ResumeCheck:
    """Start the long run under torchrun, SIGTERM it after its first checkpoint, resume it."""
    backend = "nccl" if device.kind == "cuda" else "gloo"
    recipe = pretrain_recipe(device, processes)
    row = ResumeCheck(world_size=processes, backend=backend, precision=recipe.precision)
    run = out / "pretrain"
    recipe_file = out / "pretrain-recipe.json"
    recipe_file.write_text(recipe.model_dump_json())
    command = launcher.torchrun(
        processes, "pretrain", "--recipe", str(recipe_file), "--out", str(run),
        "--corpus", launcher.corpus, "--log-every", "1", "--eval-every", str(EVAL_EVERY),
        "--checkpoint-every", str(CHECKPOINT_EVERY), "--device", requested, *launcher.thread_args())
    first_log, resume_log = out / "pretrain-killed.log", out / "pretrain-resumed.log"
    progress(f"pretrain on {processes} processes ({backend}), SIGTERM after the checkpoint at "
             f"step {CHECKPOINT_EVERY}…")
    with first_log.open("w") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT,
                                   env=launcher.environment())
        deadline = time.monotonic() + launcher.timeout_s
        while (at_signal := latest_checkpoint(run)) is None and process.poll() is None:
            if time.monotonic() > deadline:
                _stop(process)
                row.note = (f"no checkpoint within {launcher.timeout_s:.0f} s; see {first_log}")
                return row
            time.sleep(POLL_S)
        if process.poll() is not None and at_signal is None:
            row.launcher_exit = process.returncode
            row.note = (f"pretrain ended (status {process.returncode}) before its first "
                        f"checkpoint: {_tail(first_log)} (log: {first_log})")
            return row
        row.launcher_exit = _stop(process)
    row.checkpoint_at_signal = at_signal
    steps = [int(r["step"]) for r in read_metrics(run) if r.get("step", "").isdigit()]
    row.killed_at_step = max(steps, default=None)
    events = read_events(run)
    last_event = str(events[-1].get("event")) if events else None
    row.how_it_stopped = how_it_stopped(row.launcher_exit, at_signal, latest_checkpoint(run),
                                        last_event)
    if row.launcher_exit == 0 or stop_reason(run) == "complete":
        row.note = ("the run finished before SIGTERM reached it, so nothing was resumed: "
                    f"this device ran steps {CHECKPOINT_EVERY}-{PRETRAIN_STEPS} faster than "
                    "the check could stop it")
        return row
    if not wait_unlocked(run):
        row.note = (f"a worker of the killed run still holds {run / LOCK_FILE} after "
                    f"{UNLOCK_WAIT_S:.0f} s: stop it, then run the check again")
        return row
    progress("resuming it with --resume-from-latest…")
    try:
        with resume_log.open("w") as handle:
            resumed = subprocess.run([*command, "--resume-from-latest"], stdout=handle,
                                     stderr=subprocess.STDOUT, env=launcher.environment(),
                                     timeout=launcher.timeout_s, check=False)
    except subprocess.TimeoutExpired:
        row.note = f"the resumed run did not finish within {launcher.timeout_s:.0f} s; see {resume_log}"
        return row
    starts = [e for e in read_events(run) if e.get("event") == "pretrain_start"]
    row.resumed_from = starts[-1].get("resumed_from") if len(starts) > 1 else None
    rows = read_metrics(run)
    row.every_step_once = [r.get("step") for r in rows] == [
        str(step) for step in range(1, PRETRAIN_STEPS + 1)]
    try:
        manifest = json.loads((run / MANIFEST_FILE).read_text())
        row.final_steps = int(manifest["steps_done"])
    except (OSError, ValueError, KeyError, TypeError):
        row.final_steps = None
    scored = [v for r in rows if (v := _number(r.get("val_bpb"))) is not None]
    row.final_val_bpb = scored[-1] if scored else None
    rates = [v for r in rows if (v := _number(r.get("tokens_per_s"))) is not None]
    row.tokens_per_s = rates[-1] if rates else None
    problems = []
    if resumed.returncode != 0:
        problems.append(f"the resumed run exited with status {resumed.returncode}: "
                        f"{_tail(resume_log)}")
    if row.resumed_from is None:
        problems.append("the second run did not resume from a checkpoint")
    if row.final_steps != PRETRAIN_STEPS:
        problems.append(f"it ended at step {row.final_steps}, not {PRETRAIN_STEPS}")
    if not row.every_step_once:
        problems.append(f"{METRICS_FILE} does not hold steps 1-{PRETRAIN_STEPS} once each")
    if row.final_val_bpb is None:
        problems.append("no final val_bpb")
    if problems:
        row.note = "; ".join(problems) + f" (logs: {first_log}, {resume_log})"
    else:
        row.status = "passed"
    return row


# --- the whole check ---------------------------------------------------------------------


def local_processes(device: DeviceInfo) -> int:
    """One process per local GPU; two on the CPU (the smallest world that all-reduces)."""
    if device.kind != "cuda":
        return CPU_PROCESSES
    import torch

    return max(1, torch.cuda.device_count())


def run_gpu_check(out: Path, requested: str = "auto", launcher: Launcher | None = None,
                  progress: Progress = lambda message: None) -> GpuCheckReport:
    """Run both checks on the device ``requested`` (auto, cuda or cpu), write
    :data:`REPORT_FILE` in ``out`` and return the report.

    Raises ValueError, saying what to do, for ``cuda`` where torch sees no GPU.
    """
    launcher = launcher or Launcher()
    device = resolve_device(requested)
    out.mkdir(parents=True, exist_ok=True)
    trials = run_trials(out, device, requested, launcher, progress)
    processes = local_processes(device)
    pretrain = run_pretrain_check(out, device, requested, launcher, processes, progress)
    import torch

    cluster = cluster_info(processes, torch.device("cuda" if device.kind == "cuda" else "cpu"),
                           env={"WORLD_SIZE": str(processes), "LOCAL_WORLD_SIZE": str(processes),
                                "GROUP_WORLD_SIZE": "1"})
    report = GpuCheckReport(device=device.kind, device_name=device.name, trials=trials,
                            pretrain=pretrain, cluster=cluster,
                            finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    (out / REPORT_FILE).write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return report


# --- the table ---------------------------------------------------------------------------


def _figure(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


STATUS_STYLE = {"passed": "[green]passed[/]", "failed": "[bold red]FAILED[/]",
                "skipped": "[yellow]skipped[/]"}


def render_table(report: GpuCheckReport) -> Table:
    """The check as one table: a row per proxy trial, then the long run's row."""
    table = Table(title=f"recipelab gpu-check on {report.device} ({report.device_name}): "
                        + ("every check passed" if report.passed else "a check FAILED"),
                  show_lines=True)
    for column in ("check", "precision", "steps", "val_bpb", "tokens/s", "result"):
        table.add_column(column, no_wrap=True)
    table.add_column("details", overflow="fold")
    for trial in report.trials:
        table.add_row(f"proxy ({trial.preset})", trial.precision,
                      _figure(trial.steps, "d"), _figure(trial.val_bpb, ".4f"),
                      _figure(trial.tokens_per_s, ",.0f"), STATUS_STYLE[trial.status],
                      trial.note or "")
    run = report.pretrain
    details = [
        f"killed at step {run.killed_at_step} (newest checkpoint then: "
        f"{run.checkpoint_at_signal})" if run.killed_at_step is not None else None,
        run.how_it_stopped,
        f"resumed from step {run.resumed_from}" if run.resumed_from is not None else None,
        f"metrics hold every step once: {'yes' if run.every_step_once else 'no'}",
        run.note,
    ]
    table.add_row(f"pretrain ({run.world_size} × {run.backend})", run.precision,
                  _figure(run.final_steps, "d"), _figure(run.final_val_bpb, ".4f"),
                  _figure(run.tokens_per_s, ",.0f"), STATUS_STYLE[run.status],
                  "\n".join(d for d in details if d))
    return table
