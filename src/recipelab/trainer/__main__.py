"""``python -m recipelab.trainer --spec SPEC.json [--resume]``: run one trial in this process.

With ``--spec -`` the process first imports everything it needs and then waits for one line
on standard input: the spec file's path, optionally followed by ``--resume``. A launcher
starts such a worker ahead of time so that interpreter start-up and ``import torch`` overlap
the previous trial. Where the process may (root, or enough ``RLIMIT_NICE``), it does that
warm-up under the ``SCHED_IDLE`` policy, using only CPU time the running trial leaves
idle, and returns to normal scheduling once it has its spec. It then sends its own standard
output and error (including what a crashing native library prints) to ``trial.log``.

Exit status: 0 when a result file was written (whatever the trial's status), 2 when the
spec itself is unusable, in which case the reason is on standard error, and 3 when the disk
was too full to write even a short failure result.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import resource
import shlex
import signal
import sys
from pathlib import Path

from pydantic import ValidationError

from recipelab import environment
from recipelab.errors import RecipelabError
from recipelab.fsutil import atomic_write_text, is_disk_full
from recipelab.trainer.spec import EXIT_BAD_SPEC, EXIT_DISK_FULL, LOG_FILE, TrialResult, TrialSpec

PR_SET_PDEATHSIG = 1
NICE_CEILING = 20  # RLIMIT_NICE needed to return from SCHED_IDLE to nice 0


class SpecError(RecipelabError):
    """The trial spec cannot be used; nothing was run."""


def read_spec(path: Path) -> TrialSpec:
    try:
        return TrialSpec.model_validate_json(path.read_text())
    except OSError as error:
        raise SpecError(f"cannot read trial spec {path}: {error.strerror}") from None
    except ValidationError as error:
        raise SpecError(f"trial spec {path} is invalid:\n{error}") from None


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this worker when its launcher dies, even by kill -9.

    An orphaned trial would go on writing into a campaign whose orchestrator has restarted
    and re-run it; the launcher's death must end the trial. A launcher that died before
    this ran (a Ray task cancelled as it started) is caught by its pid, which the launcher
    names in ``RECIPELAB_LAUNCHER_PID``: the parent read here would already be its heir.
    Elsewhere this is a no-op.
    """
    if not sys.platform.startswith("linux"):
        return
    launcher = environment.read(environment.LAUNCHER_PID)
    parent = int(launcher) if launcher is not None else os.getppid()
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the launcher died before prctl took effect
        os._exit(1)


def can_leave_idle_scheduling() -> bool:
    """Whether this process may go back from ``SCHED_IDLE`` to normal scheduling."""
    if not hasattr(os, "SCHED_IDLE"):
        return False
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    return os.geteuid() == 0 or soft == resource.RLIM_INFINITY or soft >= NICE_CEILING


def set_scheduling(policy: int) -> None:
    os.sched_setscheduler(0, policy, os.sched_param(0))


def redirect_output(log_path: Path) -> None:
    """Point file descriptors 1 and 2 at the trial log, so nothing a trial prints is lost."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def limit_file_size(limit: int) -> None:
    """Cap the size of every file this trial writes (``RLIMIT_FSIZE``).

    A write past the cap then fails with ``EFBIG``, as a write to a full disk fails with
    ``ENOSPC``, instead of killing the process with ``SIGXFSZ``; both end the trial as
    ``disk_full``.
    """
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def write_result(spec: TrialSpec, result: TrialResult) -> int:
    """Hand in ``result``; on a full disk, hand in the shortest result that says so."""
    try:
        atomic_write_text(spec.result_path, result.model_dump_json(indent=2))
        return 0
    except OSError as error:
        if not is_disk_full(error):
            raise
        cause = error
    short = TrialResult(
        trial_id=spec.trial_id, status="failed", reason="disk_full",
        message=f"the trial ended ({result.status}) but its result could not be written: {cause}")
    try:
        atomic_write_text(spec.result_path, short.model_dump_json())
        return 0
    except OSError as error:
        if not is_disk_full(error):
            raise
        return EXIT_DISK_FULL


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipelab.trainer", description=__doc__)
    parser.add_argument("--spec", required=True,
                        help="trial spec JSON, or '-' to read its path from standard input")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the trial's last checkpoint if there is one")
    parser.add_argument("--memory-limit", type=int, metavar="BYTES",
                        help="cap this process's address space, so an oversized recipe fails "
                        "as 'oom' instead of exhausting the machine")
    parser.add_argument("--file-size-limit", type=int, metavar="BYTES",
                        help="cap the size of each file the trial writes, so a runaway trial "
                        "fails as 'disk_full' instead of filling the disk")
    args = parser.parse_args(argv)
    if args.memory_limit:
        resource.setrlimit(resource.RLIMIT_AS, (args.memory_limit, args.memory_limit))
    if args.file_size_limit:
        limit_file_size(args.file_size_limit)
    worker = args.spec == "-"
    idle = worker and can_leave_idle_scheduling()
    if worker:
        die_with_parent()
        if idle:
            set_scheduling(os.SCHED_IDLE)
    from recipelab.trainer.loop import run_trial  # the heavy import (torch) a worker pre-pays

    if worker:
        line = sys.stdin.readline()
        if idle:
            set_scheduling(os.SCHED_OTHER)
        if not line.strip():
            return EXIT_BAD_SPEC
        args = parser.parse_args(["--spec", *shlex.split(line)])
    try:
        spec = read_spec(Path(args.spec))
    except SpecError as error:
        print(error, file=sys.stderr)
        return EXIT_BAD_SPEC
    out_dir = Path(spec.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if worker:
        redirect_output(out_dir / LOG_FILE)
    result = run_trial(spec, resume=args.resume, log=sys.stdout)
    return write_result(spec, result)


if __name__ == "__main__":
    sys.exit(main())
