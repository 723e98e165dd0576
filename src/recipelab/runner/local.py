"""Trials as subprocesses of this machine, one process group each.

Starting Python and importing torch costs a second or more, which at proxy sizes is a real
share of a trial. The local executor therefore keeps one *warm worker*: a trainer process
that has already imported everything and waits on standard input for the spec it should
run. :meth:`LocalExecutor.prestart` starts it while the current trial trains, so the next
trial starts at once.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field

from recipelab import environment
from recipelab.runner import launch
from recipelab.runner.base import Executor, TrialHandle, timed_out
from recipelab.trainer.spec import TrialResult, TrialSpec


@dataclass
class LocalHandle(TrialHandle):
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)


class LocalExecutor(Executor):
    """Each trial in its own process group on this machine.

    ``memory_limit_bytes`` caps each trial's address space (``RLIMIT_AS``), so a recipe
    too large for the cap fails as ``oom`` inside the trial rather than taking the machine
    down; ``file_size_limit_bytes`` caps each file a trial writes (``RLIMIT_FSIZE``), so a
    runaway trial fails as ``disk_full`` rather than filling the disk the trajectory is on.
    ``warm`` keeps one pre-started worker ready for the next submission. ``parallel``
    is how many trials run at once on this machine's one GPU: each trainer is told
    (``RECIPELAB_PARALLEL_ON_DEVICE``), so its telemetry divides the GPU's power among them.
    """

    name = "local"

    def __init__(self, *, warm: bool = True, memory_limit_bytes: int | None = None,
                 file_size_limit_bytes: int | None = None, python: str | None = None,
                 kill_grace_s: float = launch.KILL_GRACE_S, parallel: int = 1) -> None:
        self.warm = warm
        self.env = {environment.PARALLEL_ON_DEVICE: str(parallel)} if parallel > 1 else None
        self.command = launch.trainer_command(python, memory_limit_bytes=memory_limit_bytes,
                                              file_size_limit_bytes=file_size_limit_bytes)
        self.kill_grace_s = kill_grace_s
        self._spare: subprocess.Popen[bytes] | None = None
        self._exiting: list[subprocess.Popen[bytes]] = []

    def prestart(self) -> None:
        if self.warm and (self._spare is None or self._spare.poll() is not None):
            self._spare = launch.start_trainer(self.command, self.env)

    def _take_worker(self) -> subprocess.Popen[bytes]:
        spare, self._spare = self._spare, None
        if spare is None or spare.poll() is not None:
            spare = launch.start_trainer(self.command, self.env)
        return spare

    def submit(self, spec: TrialSpec, *, resume: bool = False,
               timeout_s: float | None = None) -> LocalHandle:
        spec_path = launch.prepare(spec)
        self._reap()
        process = self._take_worker()
        launch.send_spec(process, spec_path, resume=resume)
        now = time.monotonic()
        return LocalHandle(spec=spec, submitted_at=now, process=process,
                           deadline=now + timeout_s if timeout_s else None)

    def poll(self, handle: TrialHandle) -> TrialResult | None:
        assert isinstance(handle, LocalHandle) and handle.process is not None, (
            "poll() on a handle this executor did not submit")
        process = handle.process
        code = process.poll()
        if code is not None:
            return launch.outcome(handle.spec, code)
        finished = launch.read_result(handle.spec)
        if finished is not None:
            # The result is renamed into place as the trainer's last act; tearing down a
            # torch interpreter can take longer than the rest of the loop's overhead, so
            # the process is reaped later instead of waited for.
            self._exiting.append(process)
            return finished
        if handle.deadline is not None and time.monotonic() > handle.deadline:
            launch.stop(process, self.kill_grace_s)
            return timed_out(handle.spec, handle.deadline - handle.submitted_at)
        return None

    def cancel(self, handle: TrialHandle) -> None:
        assert isinstance(handle, LocalHandle)
        if handle.process is not None and handle.process.poll() is None:
            launch.stop(handle.process, self.kill_grace_s)

    def close(self) -> None:
        if self._spare is not None:
            launch.stop(self._spare, self.kill_grace_s)
            self._spare = None
        for process in self._exiting:
            try:
                process.wait(timeout=self.kill_grace_s)
            except subprocess.TimeoutExpired:
                launch.stop(process, self.kill_grace_s)
        self._exiting = []

    def _reap(self) -> None:
        """Forget trainers that handed in their result and have since exited."""
        self._exiting = [p for p in self._exiting if p.poll() is None]
