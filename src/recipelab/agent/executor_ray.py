"""Trials as Ray tasks: several at once, on the GPUs (or CPUs) of one or more machines.

Each trial is one Ray task that runs the same entry point as :class:`LocalExecutor`
(``python -m recipelab.trainer`` in its own process group) on whichever node Ray picks: one
GPU per task where the cluster has GPUs, one CPU otherwise. The orchestrator stays the only
writer of the trajectory; a task only trains and hands back what the trial produced.

Where the task lands decides where its files go. The orchestrator writes ``spec.json`` into
the trial's ``out_dir`` before submitting; a task that finds that exact file (the same
machine, or a shared filesystem) trains in place. Elsewhere it trains in a scratch
directory and returns the result JSON and the log through the task's return value, and
the orchestrator writes them into the campaign directory.

Ray re-runs tasks of a dead worker on its own; here it must not (``max_retries=0``): a lost
worker or node is reported as an ``interrupted`` result, and the campaign decides to re-run
the candidate once, recording the re-run with ``retry_of``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import ValidationError

from recipelab.agent.executor import SPEC_FILE, Executor, TrialHandle, _describe_exit, failed
from recipelab.fsutil import atomic_write_text
from recipelab.trainer.spec import LOG_FILE, TrialResult, TrialSpec

INSTALL_HINT = "pip install 'recipelab[ray]'"
WORKER_FILE = "worker.json"  # where a task that trains in place says which processes it runs
RETURNED_LOG_LINES = 200
KILL_GRACE_S = 3.0
# Past the trial's own timeout (enforced by the task), the orchestrator cancels the task:
# covers a node that stopped answering without Ray noticing yet.
CANCEL_MARGIN_S = 30.0
AUTH_MODE_VARIABLE = "RAY_AUTH_MODE"
TOKEN_VARIABLES = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
TOKEN_FILE = Path("~/.ray/auth_token")  # where `ray start --head` keeps the cluster's token


class RayUnavailable(RuntimeError):
    """Ray is not installed or the cluster cannot be reached; the message says what to do."""


def import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise RayUnavailable(
            f"--executor ray needs Ray, which is not installed: run {INSTALL_HINT} "
            "(on every machine of the cluster), or use --executor local") from None
    return ray


def lost_worker_errors(ray: ModuleType) -> tuple[type[BaseException], ...]:
    """Ray's ways of saying the trial's worker, node or object is gone (not the trial's fault)."""
    names = ("WorkerCrashedError", "NodeDiedError", "TaskCancelledError", "ObjectLostError",
             "OwnerDiedError", "LocalRayletDiedError", "TaskUnschedulableError",
             "ActorDiedError", "RaySystemError", "ObjectReconstructionFailedError")
    return tuple(error for name in names
                 if isinstance(error := getattr(ray.exceptions, name, None), type))


@dataclass
class RayTrialHandle(TrialHandle):
    ref: Any = field(default=None, repr=False)  # the task's ObjectRef
    cancelled: bool = False


class RayExecutor(Executor):
    """Runs each trial as a Ray task; ``parallel`` trials in flight is the campaign's business.

    ``address`` is given to ``ray.init``: None starts a Ray instance on this machine, "auto"
    joins the cluster ``ray start`` set up here, ``HOST:PORT`` joins that head node. When
    Ray is already initialised in this process (a test fixture, a notebook) it is used as is
    and left running on :meth:`close`.
    """

    def __init__(self, *, address: str | None = None, python: str | None = None) -> None:
        _use_token_auth_if_set_up(address)  # before Ray is imported: it reads it then
        self.ray = import_ray()
        self.python = python
        self._owns_ray = not self.ray.is_initialized()
        if self._owns_ray:
            try:
                # "local": a new instance even when a `ray start` cluster runs here (or its
                # address file outlived it); joining one is what --ray-address auto asks for.
                self.ray.init(address=address or "local", include_dashboard=False,
                              log_to_driver=False, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as err:
                raise RayUnavailable(
                    f"cannot reach the Ray cluster at {address or 'a new local instance'}: {err}. "
                    "Start it with 'ray start --head' (and 'ray start --address HEAD:6379' on the "
                    "other machines), then pass --ray-address auto; a cluster with token "
                    f"authentication needs its token here too ({TOKEN_FILE})") from None
        self.gpus = float(self.ray.cluster_resources().get("GPU", 0.0))
        self._lost = lost_worker_errors(self.ray)
        self._task = self.ray.remote(max_retries=0)(run_trial_task)

    def submit(self, spec: TrialSpec, *, resume: bool = False,
               timeout_s: float | None = None) -> RayTrialHandle:
        out_dir = Path(spec.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        spec_json = spec.model_dump_json(indent=2)
        atomic_write_text(out_dir / SPEC_FILE, spec_json)
        with contextlib.suppress(FileNotFoundError):
            spec.result_path.unlink()  # a stale result from an earlier attempt is not this one's
        (out_dir / WORKER_FILE).unlink(missing_ok=True)
        resources = {"num_gpus": 1, "num_cpus": 0} if self.gpus >= 1 else {"num_cpus": 1}
        ref = self._task.options(**resources).remote(spec_json, resume, timeout_s, self.python)
        now = time.monotonic()
        return RayTrialHandle(spec=spec, submitted_at=now, ref=ref,
                              deadline=now + timeout_s + CANCEL_MARGIN_S if timeout_s else None)

    def poll(self, handle: TrialHandle) -> TrialResult | None:
        assert isinstance(handle, RayTrialHandle), "poll() on a handle this executor did not submit"
        ready, _ = self.ray.wait([handle.ref], timeout=0)
        if not ready:
            if handle.deadline is not None and time.monotonic() > handle.deadline:
                self.cancel(handle)
                return failed(handle.spec, "timeout",
                              "the trial's Ray task outlived its timeout and was cancelled")
            return None
        try:
            payload: dict[str, Any] = self.ray.get(handle.ref)
        except self._lost as err:
            if handle.cancelled:
                return failed(handle.spec, "crash", "cancelled")
            return TrialResult(trial_id=handle.spec.trial_id, status="interrupted",
                               message=f"lost its Ray worker: {type(err).__name__}: "
                               f"{_first_line(err)}")
        except self.ray.exceptions.RayTaskError as err:
            return failed(handle.spec, "crash", f"the Ray task raised: {_first_line(err)}")
        return self._settle(handle.spec, payload)

    def cancel(self, handle: TrialHandle) -> None:
        assert isinstance(handle, RayTrialHandle)
        handle.cancelled = True
        # force: kill the worker process; the trainer dies with it (it asked Linux to).
        with contextlib.suppress(Exception):
            self.ray.cancel(handle.ref, force=True)

    def close(self) -> None:
        if self._owns_ray and self.ray.is_initialized():
            self.ray.shutdown()

    @staticmethod
    def _settle(spec: TrialSpec, payload: dict[str, Any]) -> TrialResult:
        """The trial's result; files of a trial that trained elsewhere are written here."""
        out_dir = Path(spec.out_dir)
        if not payload["in_place"]:
            if payload["log"]:
                atomic_write_text(out_dir / LOG_FILE, payload["log"])
            if payload["result"]:
                atomic_write_text(spec.result_path, payload["result"])
        if payload["result"]:
            try:
                result = TrialResult.model_validate_json(payload["result"])
            except ValidationError as err:
                return failed(spec, "crash", f"the trial's result is invalid: {_first_line(err)}")
            if result.trial_id != spec.trial_id:
                return failed(spec, "crash", f"the result names trial {result.trial_id}")
            return result
        tail = " | ".join(payload["log"].strip().splitlines()[-5:])
        return failed(spec, "crash", f"the trainer on {payload['host']} {payload['exit']} "
                      "without a result" + (f"; last log lines: {tail}" if tail else ""))


def _use_token_auth_if_set_up(address: str | None) -> None:
    """Join a token-authenticated cluster by HOST:PORT as Ray joins one by "auto".

    Ray turns token authentication on for "auto" when this machine holds a token, but not
    for an explicit address, where the connection then fails on a missing token. An explicit
    ``RAY_AUTH_MODE`` is left as it is, and so is a Ray this process already started.
    """
    if address in (None, "auto") or AUTH_MODE_VARIABLE in os.environ or "ray" in sys.modules:
        return
    if TOKEN_FILE.expanduser().exists() or any(os.environ.get(name) for name in TOKEN_VARIABLES):
        os.environ[AUTH_MODE_VARIABLE] = "token"


def run_trial_task(spec_json: str, resume: bool, timeout_s: float | None,
                   python: str | None) -> dict[str, Any]:
    """The Ray task: train one trial with the trainer entry point and hand back its output.

    Runs on a Ray worker, possibly on another machine; it imports nothing heavy itself.
    """
    spec = TrialSpec.model_validate_json(spec_json)
    out_dir = Path(spec.out_dir)
    in_place = _same_file(out_dir / SPEC_FILE, spec_json)
    with contextlib.ExitStack() as stack:
        if not in_place:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="recipelab-")))
            spec = spec.model_copy(update={"out_dir": str(scratch / spec.trial_id)})
            out_dir = Path(spec.out_dir)
            out_dir.mkdir(parents=True)
            atomic_write_text(out_dir / SPEC_FILE, spec.model_dump_json(indent=2))
        with contextlib.suppress(FileNotFoundError):
            spec.result_path.unlink()
        process = subprocess.Popen(
            [python or sys.executable, "-m", "recipelab.trainer", "--spec", "-"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)  # its own process group; it dies with this worker
        worker = {"host": socket.gethostname(), "worker_pid": os.getpid(),
                  "trainer_pid": process.pid}
        atomic_write_text(out_dir / WORKER_FILE, json.dumps(worker))
        line = shlex.join([str((out_dir / SPEC_FILE).resolve()), *(["--resume"] if resume else [])])
        assert process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            process.stdin.write((line + "\n").encode())
            process.stdin.close()
        try:
            exit_text = _describe_exit(process.wait(timeout=timeout_s))
        except subprocess.TimeoutExpired:
            _kill_group(process)
            result = failed(spec, "timeout",
                            f"the trial ran past its {timeout_s:.0f} s timeout and was killed")
            atomic_write_text(spec.result_path, result.model_dump_json(indent=2))
            exit_text = "was killed at its timeout"
        finally:
            if process.poll() is None:
                _kill_group(process)
        return {"in_place": in_place, "host": worker["host"], "exit": exit_text,
                "result": _read(spec.result_path), "log": _tail(out_dir / LOG_FILE)}


def _same_file(path: Path, text: str) -> bool:
    try:
        return path.read_text() == text
    except OSError:
        return False


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _tail(path: Path, lines: int = RETURNED_LOG_LINES) -> str:
    text = _read(path)
    return "" if text is None else "\n".join(text.splitlines()[-lines:]) + "\n"


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:300] if text else type(err).__name__
