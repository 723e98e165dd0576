"""The launch protocol: how a trial's trainer process is started, stopped and read back.

One protocol for every executor that starts ``python -m recipelab.trainer`` (this machine's
subprocesses, Ray tasks on other machines), so they cannot drift apart:

1. :func:`prepare` writes ``spec.json`` into the trial's ``out_dir`` and removes a stale
   ``result.json`` an earlier attempt left (it is not this attempt's);
2. :func:`start_trainer` starts the trainer in its own process group, waiting on standard
   input; :func:`send_spec` then hands it the spec's path (and ``--resume``);
3. :func:`stop` sends the group SIGTERM, then SIGKILL after a grace period;
4. :func:`read_result` accepts only a valid result naming this trial; :func:`outcome` turns
   a trainer that exited without one into a ``failed`` result that says how it ended,
   with the last lines of its log.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from pydantic import ValidationError

from recipelab import environment
from recipelab.fsutil import atomic_write_text
from recipelab.runner.base import failed
from recipelab.trainer.spec import EXIT_DISK_FULL, LOG_FILE, TrialResult, TrialSpec

SPEC_FILE = "spec.json"
LOG_TAIL_LINES = 5
KILL_GRACE_S = 3.0


def prepare(spec: TrialSpec) -> Path:
    """Write the trial's spec file (returned) and clear a stale result."""
    out_dir = Path(spec.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec_path = out_dir / SPEC_FILE
    atomic_write_text(spec_path, spec.model_dump_json(indent=2))
    with contextlib.suppress(FileNotFoundError):
        spec.result_path.unlink()
    return spec_path


def trainer_command(python: str | None = None, *, memory_limit_bytes: int | None = None,
                    file_size_limit_bytes: int | None = None) -> list[str]:
    """The trainer's command line; the limits become ``RLIMIT_AS`` and ``RLIMIT_FSIZE``."""
    command = [python or sys.executable, "-m", "recipelab.trainer", "--spec", "-"]
    if memory_limit_bytes:
        command += ["--memory-limit", str(memory_limit_bytes)]
    if file_size_limit_bytes:
        command += ["--file-size-limit", str(file_size_limit_bytes)]
    return command


def start_trainer(command: list[str], env: dict[str, str] | None = None
                  ) -> subprocess.Popen[bytes]:
    """A trainer waiting on standard input for its spec, in its own process group so that
    a stop reaches its children too; ``env`` is added to this process's environment. The
    trainer is told this process's pid, so it can tell whether its launcher died before it
    asked Linux to end it with its launcher."""
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, environment.LAUNCHER_PID: str(os.getpid()),
                                 **(env or {})})


def send_spec(process: subprocess.Popen[bytes], spec_path: Path, *, resume: bool) -> None:
    """Hand a waiting trainer its spec. A trainer that died while waiting is left to the
    caller's poll, which reports it as a crash."""
    line = shlex.join([str(spec_path.resolve()), *(["--resume"] if resume else [])]) + "\n"
    assert process.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        process.stdin.write(line.encode())
        process.stdin.close()


def stop(process: subprocess.Popen[bytes], grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM the trainer's whole process group, then SIGKILL what is left after a grace."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def parse_result(spec: TrialSpec, text: str) -> TrialResult | None:
    """``text`` as this trial's result; None when it is not (yet) a valid result."""
    try:
        result = TrialResult.model_validate_json(text)
    except ValidationError:
        return None
    if result.trial_id != spec.trial_id:
        return failed(spec, "crash", f"the result file names trial {result.trial_id}")
    return result


def read_result(spec: TrialSpec) -> TrialResult | None:
    try:
        return parse_result(spec, spec.result_path.read_text())
    except OSError:
        return None


def describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with code {code}"


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    with contextlib.suppress(OSError):
        text = path.read_text(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:])
    return ""


def outcome(spec: TrialSpec, code: int, *, host: str | None = None) -> TrialResult:
    """The result of a trainer that exited with ``code``: its own result when it wrote one,
    else a failure that says how it ended."""
    result = read_result(spec)
    if result is not None:
        return result
    tail = log_tail(Path(spec.out_dir) / LOG_FILE)
    last_lines = f"; last log lines: {tail}" if tail else ""
    if code in (EXIT_DISK_FULL, -signal.SIGXFSZ):
        return failed(spec, "disk_full", "the trainer could not write its result: the disk "
                      f"is full or a file-size limit was reached{last_lines}")
    where = f" on {host}" if host else ""
    return failed(spec, "crash", f"the trainer{where} {describe_exit(code)} without a result"
                  + last_lines)
