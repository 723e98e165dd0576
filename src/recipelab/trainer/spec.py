"""The contract between whoever launches a trial and the trainer process that runs it.

A :class:`TrialSpec` goes in as JSON; one :class:`TrialResult` comes out as JSON, written
atomically. Nothing else crosses the process boundary, so the launcher never needs torch.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
from pathlib import Path
from typing import Literal

from pydantic import Field

from recipelab import __version__
from recipelab.errors import RecipelabError
from recipelab.recipe import Recipe, StrictModel
from recipelab.trainer.telemetry import DEFAULT_INTERVAL_S, TelemetrySummary

TrialKind = Literal["proxy", "rung", "stress", "attribution", "width"]
# disk_full: the trial could not write its log, checkpoint or result (no space, or over a
# file-size limit); the recipe itself may be fine.
FailureReason = Literal["oom", "nan", "diverged", "timeout", "crash", "disk_full"]

RESULT_FILE = "result.json"
LOG_FILE = "trial.log"
CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_LATEST = "latest"  # the file in CHECKPOINT_DIR naming its newest complete step
EXIT_BAD_SPEC = 2  # the trainer's exit status when its spec is unusable
EXIT_DISK_FULL = 3  # ... when the disk was too full to write even a short failure result


class DataError(RecipelabError, ValueError):
    """Bad training data: a corpus or tokenizer that cannot be read as given. The message
    names the problem and the fix."""


class CorpusSpec(StrictModel):
    """Where training text comes from.

    ``source`` is a built-in corpus name (``python-docs``, ``python-source``) or a path: a
    text file, a directory of ``.txt``/``.md`` files, a Parquet file or directory of shards,
    or a directory holding nanoGPT-style ``train.bin`` and ``val.bin``.
    """

    source: str = Field(default="python-docs",
                        description="python-docs, python-source, or a path")
    text_column: str = "text"
    val_fraction: float = Field(default=0.1, gt=0.0, lt=0.5)
    max_bytes: int | None = Field(default=None, ge=1024, description=(
        "read at most this many bytes of a corpus given as a path, streamed"),
        json_schema_extra={"default_means": "what the longest run reads, stress_steps x batch x "
                                            "seq_len x 1.25, plus the validation share"})
    cache_dir: str | None = None


class TrialSpec(StrictModel):
    trial_id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    kind: TrialKind = "proxy"
    recipe: Recipe
    corpus: CorpusSpec = CorpusSpec()
    out_dir: str
    device: Literal["auto", "cpu", "cuda"] = "auto"
    log_every: int = Field(default=10, ge=1)
    checkpoint_every: int = Field(default=0, ge=0)
    divergence_factor: float = Field(
        default=2.0, gt=1.0,
        description="a loss above this multiple of the uniform-guess loss ln(vocab) is divergence",
    )
    timed_warmup_steps: int | None = Field(
        default=None, ge=0,
        description="first steps left out of tokens_per_s and step_ms (default: min(5, steps // 5))",
    )
    telemetry_interval_s: float = Field(default=DEFAULT_INTERVAL_S, gt=0.0)
    threads: int | None = Field(
        default=None, ge=1, le=1024,
        description="intra-op CPU threads of this trial (default: torch's, all cores)",
    )
    compile: bool = Field(
        default=False,
        description="torch.compile the model, with the compile cache under ~/.cache/recipelab",
    )

    @property
    def result_path(self) -> Path:
        return Path(self.out_dir) / RESULT_FILE

    @property
    def checkpoint_path(self) -> Path:
        return Path(self.out_dir) / CHECKPOINT_DIR


class CurvePoint(StrictModel):
    """One point of a trial's training curve: the mean loss of the last ``log_every`` steps.

    The trainer writes each point to ``trial.log`` as :meth:`log_line` says, as it happens;
    :meth:`from_log` reads them back while the trial still runs (the live report's curves)."""

    step: int
    loss: float
    grad_norm: float
    lr: float

    def log_line(self) -> str:
        return (f"step {self.step} loss {self.loss:.4f} grad_norm {self.grad_norm:.3f} "
                f"lr {self.lr:.3g}")

    @classmethod
    def from_log(cls, text: str) -> list[CurvePoint]:
        """Every point :meth:`log_line` wrote in ``text``; other lines are skipped, and so is
        what follows the last newline: a line still being written, whose number may be cut
        short anywhere (``lr 1e-05`` cut to ``lr 1`` would read as a rate of 1)."""
        points = []
        for line in text.split("\n")[:-1]:
            match = LOG_LINE.fullmatch(line)
            with contextlib.suppress(ValueError):  # a number cut short
                if match:
                    step, loss, grad_norm, lr = match.groups()
                    points.append(cls(step=int(step), loss=float(loss),
                                      grad_norm=float(grad_norm), lr=float(lr)))
        return points


LOG_LINE = re.compile(r"step (\d+) loss (\S+) grad_norm (\S+) lr (\S+)")
"""A line :meth:`CurvePoint.log_line` wrote."""


class Provenance(StrictModel):
    device: str
    host: str
    code_version: str
    python: str
    libraries: dict[str, str]
    seed: int
    threads: int


def code_version() -> str:
    """The git commit of the source tree when it is a checkout, else the package version.

    Here rather than beside the trainer's device code, so that the orchestrator records it
    without importing torch."""
    source = Path(__file__).resolve().parents[3]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["git", "-C", str(source), "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=5, check=False)
        if out.returncode == 0 and out.stdout.strip():
            return f"{__version__}+{out.stdout.strip()}"
    return __version__


class EvalBlocks(StrictModel):
    """The evaluation slice's blocks as one trial scored them: nats and bytes per block
    (``trainer.evaluate``), so that a gain's sampling error can be read from two trials on the
    same slice; ``whole_text`` when the slice is the whole validation text."""

    nats: list[float]
    bytes: list[int]
    whole_text: bool = False


class TrialResult(StrictModel):
    trial_id: str
    # interrupted: the executor lost the worker or machine running the trial (never the
    # trainer's own verdict); the campaign re-runs the candidate once.
    status: Literal["complete", "failed", "interrupted"]
    reason: FailureReason | None = None
    message: str | None = None
    val_bpb: float | None = None
    # the sampling error of val_bpb over the evaluation slice's windows (trainer.evaluate)
    val_bpb_stderr: float | None = None
    eval_blocks: EvalBlocks | None = None
    train_loss: float | None = None
    steps_done: int = 0
    curve: list[CurvePoint] = Field(default_factory=list)
    # every step's train loss, step 1 first (the curve has one point per log_every steps);
    # None for a non-finite loss, which JSON cannot carry
    losses: list[float | None] = Field(default_factory=list)
    tokens_per_s: float | None = None
    step_ms: float | None = None
    peak_memory_bytes: int | None = None
    params: int | None = None
    setup_s: float | None = None
    train_s: float | None = None
    eval_s: float | None = None
    resumed_from_step: int | None = None
    provenance: Provenance | None = None
    timed_steps: int | None = None  # the steps tokens_per_s and step_ms were measured over
    telemetry: TelemetrySummary | None = None
    # the cluster node that ran the trial ("host/node id"), filled in by the Ray executor,
    # also for a trial the node's death interrupted; None for a trial on this machine
    node: str | None = None
