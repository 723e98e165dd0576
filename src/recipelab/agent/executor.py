"""Executors run trials somewhere and hand back one :class:`TrialResult` each.

The :class:`Executor` interface is three calls: ``submit`` a spec, ``poll`` its handle until
a result comes back, ``cancel`` it. :class:`LocalExecutor` runs each trial as
``python -m recipelab.trainer`` in its own process group on this machine.

Starting Python and importing torch costs a second or more, which at proxy sizes is a real
share of a trial. The local executor therefore keeps one *warm worker*: a trainer process
that has already imported everything and waits on standard input for the spec it should
run. It is started while the current trial trains, so the next trial starts at once.
"""

from __future__ import annotations

import abc
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from recipelab.fsutil import atomic_write_text
from recipelab.trainer.spec import EXIT_DISK_FULL, LOG_FILE, FailureReason, TrialResult, TrialSpec

SPEC_FILE = "spec.json"
LOG_TAIL_LINES = 5


@dataclass
class TrialHandle:
    """A submitted trial. ``deadline`` is a ``time.monotonic()`` instant, or None."""

    spec: TrialSpec
    submitted_at: float
    deadline: float | None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def trial_id(self) -> str:
        return self.spec.trial_id


class Executor(abc.ABC):
    """Where trials run. Implementations never raise for a failing trial: it is a result."""

    @abc.abstractmethod
    def submit(self, spec: TrialSpec, *, resume: bool = False,
               timeout_s: float | None = None) -> TrialHandle:
        """Start ``spec``; ``resume`` continues from its checkpoint when there is one."""

    @abc.abstractmethod
    def poll(self, handle: TrialHandle) -> TrialResult | None:
        """The trial's result once it has ended, else None. Enforces the timeout."""

    @abc.abstractmethod
    def cancel(self, handle: TrialHandle) -> None:
        """Stop the trial now; a later ``poll`` returns a failed result."""

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op unless overridden
        """Release whatever the executor holds (warm workers, connections)."""

    def wait(self, handle: TrialHandle, interval_s: float = 0.02) -> TrialResult:
        """Poll until the trial ends."""
        while True:
            result = self.poll(handle)
            if result is not None:
                return result
            time.sleep(interval_s)


def failed(spec: TrialSpec, reason: FailureReason, message: str) -> TrialResult:
    return TrialResult(trial_id=spec.trial_id, status="failed", reason=reason, message=message)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    with contextlib.suppress(OSError):
        text = path.read_text(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:])
    return ""


def _describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with code {code}"


class LocalExecutor(Executor):
    """Each trial in its own process group on this machine.

    ``memory_limit_bytes`` caps each trial's address space (``RLIMIT_AS``), so a recipe
    too large for the cap fails as ``oom`` inside the trial rather than taking the machine
    down; ``file_size_limit_bytes`` caps each file a trial writes (``RLIMIT_FSIZE``), so a
    runaway trial fails as ``disk_full`` rather than filling the disk the trajectory is on.
    ``warm`` keeps one pre-started worker ready for the next submission.
    """

    def __init__(self, *, warm: bool = True, memory_limit_bytes: int | None = None,
                 file_size_limit_bytes: int | None = None,
                 python: str = sys.executable, kill_grace_s: float = 3.0) -> None:
        self.warm = warm
        self.memory_limit_bytes = memory_limit_bytes
        self.file_size_limit_bytes = file_size_limit_bytes
        self.python = python
        self.kill_grace_s = kill_grace_s
        self._spare: subprocess.Popen[bytes] | None = None
        self._exiting: list[subprocess.Popen[bytes]] = []

    # -- worker processes ------------------------------------------------------------------

    def _start_worker(self) -> subprocess.Popen[bytes]:
        limits = [*(["--memory-limit", str(self.memory_limit_bytes)]
                    if self.memory_limit_bytes else []),
                  *(["--file-size-limit", str(self.file_size_limit_bytes)]
                    if self.file_size_limit_bytes else [])]
        return subprocess.Popen(
            [self.python, "-m", "recipelab.trainer", "--spec", "-", *limits],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, so a kill reaches its children
        )

    def _take_worker(self) -> subprocess.Popen[bytes]:
        spare, self._spare = self._spare, None
        if spare is None or spare.poll() is not None:
            spare = self._start_worker()
        return spare

    def prestart(self) -> None:
        """Start the warm worker now (the agent calls this while a trial trains)."""
        if self.warm and (self._spare is None or self._spare.poll() is not None):
            self._spare = self._start_worker()

    # -- Executor --------------------------------------------------------------------------

    def submit(self, spec: TrialSpec, *, resume: bool = False,
               timeout_s: float | None = None) -> TrialHandle:
        out_dir = Path(spec.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        spec_path = out_dir / SPEC_FILE
        atomic_write_text(spec_path, spec.model_dump_json(indent=2))
        with contextlib.suppress(FileNotFoundError):
            spec.result_path.unlink()  # a stale result from an earlier attempt is not this one's
        self._reap()
        process = self._take_worker()
        line = shlex.join([str(spec_path.resolve()), *(["--resume"] if resume else [])]) + "\n"
        assert process.stdin is not None
        try:
            process.stdin.write(line.encode())
            process.stdin.close()
        except BrokenPipeError:  # the worker died while waiting; its poll reports a crash
            pass
        now = time.monotonic()
        return TrialHandle(spec=spec, submitted_at=now, process=process,
                           deadline=now + timeout_s if timeout_s else None)

    def poll(self, handle: TrialHandle) -> TrialResult | None:
        process = handle.process
        assert process is not None, "poll() on a handle this executor did not submit"
        code = process.poll()
        if code is None:
            finished = self._read_result(handle.spec)
            if finished is not None:
                # The result is renamed into place as the trainer's last act; tearing down a
                # torch interpreter can take longer than the rest of the loop's overhead, so
                # the process is reaped later instead of waited for.
                self._exiting.append(process)
                return finished
            if handle.deadline is not None and time.monotonic() > handle.deadline:
                self._kill(process)
                limit = handle.deadline - handle.submitted_at
                return failed(handle.spec, "timeout",
                              f"the trial ran past its {limit:.0f} s timeout and was killed")
            return None
        return self._collect(handle.spec, code)

    def cancel(self, handle: TrialHandle) -> None:
        if handle.process is not None and handle.process.poll() is None:
            self._kill(handle.process)

    def close(self) -> None:
        if self._spare is not None:
            self._kill(self._spare)
            self._spare = None
        for process in self._exiting:
            try:
                process.wait(timeout=self.kill_grace_s)
            except subprocess.TimeoutExpired:
                self._kill(process)
        self._exiting = []

    def _kill(self, process: subprocess.Popen[bytes]) -> None:
        """SIGTERM the trial's whole process group, then SIGKILL what is left after a grace."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=self.kill_grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    @staticmethod
    def _read_result(spec: TrialSpec) -> TrialResult | None:
        try:
            result = TrialResult.model_validate_json(spec.result_path.read_text())
        except (OSError, ValidationError):
            return None
        if result.trial_id != spec.trial_id:
            return failed(spec, "crash", f"the result file names trial {result.trial_id}")
        return result

    def _collect(self, spec: TrialSpec, code: int) -> TrialResult:
        result = self._read_result(spec)
        if result is not None:
            return result
        tail = log_tail(Path(spec.out_dir) / LOG_FILE)
        last_lines = f"; last log lines: {tail}" if tail else ""
        if code in (EXIT_DISK_FULL, -signal.SIGXFSZ):
            return failed(spec, "disk_full", "the trainer could not write its result: the disk "
                          f"is full or a file-size limit was reached{last_lines}")
        return failed(spec, "crash", f"the trainer {_describe_exit(code)} without a result"
                      + last_lines)

    def _reap(self) -> None:
        """Collect trainers that handed in their result and have since exited."""
        self._exiting = [p for p in self._exiting if p.poll() is None]
