"""Trials as Ray tasks: several at once, on the GPUs (or CPUs) of one or more machines.

Each trial is one Ray task that runs the trainer through the same launch protocol as
:class:`~recipelab.runner.local.LocalExecutor` (:mod:`recipelab.runner.launch`), on whichever
node Ray picks: one GPU per task where the cluster has GPUs, one CPU otherwise. The
orchestrator stays the only writer of the trajectory; a task only trains and hands back what
the trial produced.

Where the task lands decides where its files go (:mod:`recipelab.runner.files`).
``shared_files=None`` finds out per task: a task that can read the exact ``spec.json`` the
orchestrator wrote trains in place; elsewhere it trains in a scratch directory, checkpoints
stream back through a Ray queue as they are written, and the result and log come back with
the task's return value. ``shared_files=False`` always uses scratch (a cluster whose nodes
see a *different* directory at the same path).

Ray re-runs tasks of a dead worker on its own; here it must not (``max_retries=0``): a lost
worker or node is reported as an ``interrupted`` result, and the campaign decides to re-run
the candidate once, recording the re-run with ``retry_of``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from recipelab.errors import RecipelabError
from recipelab.fsutil import atomic_write_text
from recipelab.guardrails.base import DeviceInfo
from recipelab.runner import files, launch
from recipelab.runner.base import Executor, TrialHandle, failed, timed_out
from recipelab.trainer.spec import CHECKPOINT_DIR, LOG_FILE, TrialResult, TrialSpec

INSTALL_HINT = "pip install 'recipelab[ray]'"
WORKER_FILE = "worker.json"  # where a task says which processes it runs
RETURNED_LOG_LINES = 200
NODE_MESSAGE, CHECKPOINT_MESSAGE = "node", "checkpoint"  # what a task sends home
NODE_ID_CHARS = 8  # of a node's id in records: enough to tell a cluster's nodes apart
CHECKPOINT_POLL_S = 0.5
RECEIVE_INTERVAL_S = 0.5
"""How often polling asks the task inbox for news while every task still runs: each question
is a call to the inbox's actor, and a campaign polls its trials 50 times a second."""
# Past the trial's own timeout (enforced by the task), the orchestrator cancels the task:
# covers a node that stopped answering without Ray noticing yet.
CANCEL_MARGIN_S = 30.0
AUTH_MODE_VARIABLE = "RAY_AUTH_MODE"
TOKEN_VARIABLES = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
RAY_CONNECT_TIMEOUT_S = 5.0
"""How long a head node's port has to accept a connection."""
TOKEN_FILE = Path("~/.ray/auth_token")  # where `ray start --head` keeps the cluster's token


class RayUnavailable(RecipelabError, RuntimeError):
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

    name = "ray"

    def __init__(self, *, address: str | None = None, python: str | None = None,
                 shared_files: bool | None = None) -> None:
        _use_token_auth_if_set_up(address)  # before Ray is imported: it reads it then
        self.ray = import_ray()
        self.python = python
        self.shared_files = shared_files
        self._owns_ray = not self.ray.is_initialized()
        if self._owns_ray:
            _refuse_unreachable(address)
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
        self._inbox: Any = None  # a ray.util.queue.Queue of what tasks send, made on first need
        self._nodes: dict[str, str] = {}  # a trial's folder -> the node its task runs on
        self._received_at = -math.inf  # time.monotonic() of the last look at the inbox

    def slots(self) -> int:
        """One trial per GPU of the cluster (each task takes one), or per CPU on a cluster
        without GPUs (each task takes one and trains with one thread)."""
        if self.gpus >= 1:
            return int(self.gpus)
        return max(1, int(self.ray.cluster_resources().get("CPU", 1.0)))

    @property
    def _resources(self) -> dict[str, float]:
        return {"num_gpus": 1, "num_cpus": 0} if self.gpus >= 1 else {"num_cpus": 1}

    def device(self, requested: str) -> DeviceInfo:
        """The device a trial's worker resolves ``requested`` to, asked of a worker with a
        trial's resources, so the guardrails judge the cluster's hardware, not this machine's.

        Raises ValueError (saying what to do) when the worker has no such device."""
        probe = self.ray.remote(max_retries=0)(_resolve_on_worker).options(**self._resources)
        found: DeviceInfo | str = self.ray.get(probe.remote(requested))
        if isinstance(found, str):
            raise ValueError(f"on the Ray workers: {found}")
        return found

    def _task_inbox(self) -> Any:
        """The queue tasks send home through: an actor pinned to this process's node, so
        that it dies with the orchestrator and never with a worker node."""
        if self._inbox is None:
            from ray.util.queue import Queue
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            here = NodeAffinitySchedulingStrategy(self.ray.get_runtime_context().get_node_id(),
                                                  soft=False)
            self._inbox = Queue(actor_options={"num_cpus": 0, "scheduling_strategy": here})
        return self._inbox

    def submit(self, spec: TrialSpec, *, resume: bool = False,
               timeout_s: float | None = None) -> RayTrialHandle:
        spec_path = launch.prepare(spec)
        for stale in (WORKER_FILE, files.NODE_FILE):  # an earlier attempt's
            (Path(spec.out_dir) / stale).unlink(missing_ok=True)
        checkpoint = files.pack_checkpoint(spec.checkpoint_path) if resume else None
        inbox = self._task_inbox()
        ref = self._task.options(**self._resources).remote(
            spec_path.read_text(), resume, timeout_s, self.python, self.shared_files,
            checkpoint, inbox)
        now = time.monotonic()
        return RayTrialHandle(spec=spec, submitted_at=now, ref=ref,
                              deadline=now + timeout_s + CANCEL_MARGIN_S if timeout_s else None)

    def poll(self, handle: TrialHandle) -> TrialResult | None:
        assert isinstance(handle, RayTrialHandle), "poll() on a handle this executor did not submit"
        self._receive(every=RECEIVE_INTERVAL_S)
        ready, _ = self.ray.wait([handle.ref], timeout=0)
        if not ready:
            if handle.deadline is not None and time.monotonic() > handle.deadline:
                self.cancel(handle)
                return timed_out(handle.spec, handle.deadline - handle.submitted_at,
                                 "its Ray task was cancelled")
            return None
        try:
            payload: dict[str, Any] = self.ray.get(handle.ref)
        except self._lost as err:
            if handle.cancelled:
                return failed(handle.spec, "crash", "cancelled")
            self._receive()
            node = self._nodes.pop(handle.spec.out_dir, None)
            return TrialResult(trial_id=handle.spec.trial_id, status="interrupted", node=node,
                               message=f"lost its Ray worker{f' on node {node}' if node else ''}: "
                               f"{type(err).__name__}: {_first_line(err)}")
        except self.ray.exceptions.RayTaskError as err:
            raised = failed(handle.spec, "crash", f"the Ray task raised: {_first_line(err)}")
            return raised.model_copy(update={"node": self._nodes.pop(handle.spec.out_dir, None)})
        self._receive()
        self._nodes.pop(handle.spec.out_dir, None)
        return _settle(handle.spec, payload).model_copy(update={"node": payload["node"]})

    def cancel(self, handle: TrialHandle) -> None:
        assert isinstance(handle, RayTrialHandle)
        handle.cancelled = True
        # force: kill the worker process; the trainer dies with it (it asked Linux to).
        with contextlib.suppress(Exception):
            self.ray.cancel(handle.ref, force=True)

    def close(self) -> None:
        self._receive()
        if self._owns_ray and self.ray.is_initialized():
            self.ray.shutdown()

    def _receive(self, every: float = 0.0) -> None:
        """Take in what tasks have sent since the last look: the node each runs on (sent
        before its trainer starts, so a trial its node's death interrupts still names the
        node) and the checkpoints of tasks training in scratch. ``every``: not when the last
        look was less than that many seconds ago (a task that ended is always looked for)."""
        now = time.monotonic()
        if self._inbox is None or now - self._received_at < every:
            return
        self._received_at = now
        waiting = self._inbox.qsize()
        for kind, out_dir, content in self._inbox.get_nowait_batch(waiting) if waiting else ():
            if kind == NODE_MESSAGE:
                self._nodes[out_dir] = content
                files.write_node(Path(out_dir), content)
            else:
                files.unpack_checkpoint(Path(out_dir) / CHECKPOINT_DIR, content)


def node_label(host: str, node_id: str) -> str:
    """A Ray node as records name it: its machine and the start of the id ``ray list nodes``
    prints (two nodes may share a machine)."""
    return f"{host}/{node_id[:NODE_ID_CHARS]}"


def _settle(spec: TrialSpec, payload: dict[str, Any]) -> TrialResult:
    """The trial's result; the files of a trial that trained elsewhere are written here."""
    if not payload["in_place"]:
        if payload["log"]:
            atomic_write_text(Path(spec.out_dir) / LOG_FILE, payload["log"])
        if payload["result"]:
            atomic_write_text(spec.result_path, payload["result"])
    if payload["result"]:
        result = launch.parse_result(spec, payload["result"])
        return result or failed(spec, "crash", "the trial's result is not a valid result")
    tail = " | ".join(payload["log"].strip().splitlines()[-launch.LOG_TAIL_LINES:])
    return failed(spec, "crash", f"the trainer on {payload['host']} {payload['exit']} "
                  "without a result" + (f"; last log lines: {tail}" if tail else ""))


def _refuse_unreachable(address: str | None) -> None:
    """Raise RayUnavailable at once when nothing answers at a ``HOST:PORT`` address: Ray
    itself retries an unreachable head node for minutes, printing a warning every few
    seconds, before it gives up."""
    if address is None or address in ("auto", "local") or "://" in address:
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "localhost", int(port)),
                                      timeout=RAY_CONNECT_TIMEOUT_S):
            return
    except (OSError, ValueError) as err:
        raise RayUnavailable(
            f"cannot reach the Ray cluster at {address}: nothing answers there ({err}). "
            "Start it with 'ray start --head' (and 'ray start --address HEAD:6379' on the "
            "other machines), then pass --ray-address auto or the head's HOST:6379") from None


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


def _resolve_on_worker(requested: str) -> DeviceInfo | str:
    """On a worker: its device for ``requested``, or what is wrong with asking for it."""
    from recipelab.guardrails.hardware import resolve_device

    try:
        return resolve_device(requested)
    except ValueError as error:
        return str(error)


def run_trial_task(spec_json: str, resume: bool, timeout_s: float | None, python: str | None,
                   shared_files: bool | None, checkpoint: files.Packed | None,
                   inbox: Any) -> dict[str, Any]:
    """The Ray task: train one trial through the launch protocol and hand back its output.

    Runs on a Ray worker, possibly on another machine; it imports nothing heavy itself.
    """
    spec = TrialSpec.model_validate_json(spec_json)
    home_dir = spec.out_dir
    in_place = shared_files is not False and _same_file(spec.out_dir, spec_json)
    with contextlib.ExitStack() as stack:
        if not in_place:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="recipelab-")))
            spec = spec.model_copy(update={"out_dir": str(scratch / spec.trial_id)})
            if checkpoint is not None:
                files.unpack_checkpoint(spec.checkpoint_path, checkpoint)
        spec_path = launch.prepare(spec)
        host = socket.gethostname()
        node = node_label(host, _this_node_id())
        inbox.put((NODE_MESSAGE, home_dir, node))  # delivered before the trainer starts
        process = launch.start_trainer(launch.trainer_command(python))
        atomic_write_text(Path(spec.out_dir) / WORKER_FILE, json.dumps(
            {"host": host, "node": node, "worker_pid": os.getpid(), "trainer_pid": process.pid}))
        launch.send_spec(process, spec_path, resume=resume)
        deadline = time.monotonic() + timeout_s if timeout_s else None
        sent = files.latest_step(spec.checkpoint_path)
        streams = not in_place and bool(spec.checkpoint_every)
        try:
            while (code := process.poll()) is None:
                if streams:
                    sent = _send_new_checkpoint(spec, home_dir, sent, inbox)
                if deadline is not None and time.monotonic() > deadline:
                    launch.stop(process)
                    result = timed_out(spec, timeout_s or 0.0)
                    atomic_write_text(spec.result_path, result.model_dump_json(indent=2))
                    code = process.wait()
                    break
                time.sleep(CHECKPOINT_POLL_S)
        finally:
            if process.poll() is None:
                launch.stop(process)
        if streams:
            _send_new_checkpoint(spec, home_dir, sent, inbox)
        return {"in_place": in_place, "host": host, "node": node,
                "exit": launch.describe_exit(code),
                "result": _read(spec.result_path), "log": _tail(Path(spec.out_dir) / LOG_FILE)}


def _this_node_id() -> str:
    import ray

    node_id: str = ray.get_runtime_context().get_node_id()
    return node_id


def _send_new_checkpoint(spec: TrialSpec, home_dir: str, sent: str | None, inbox: Any) -> str | None:
    """Send the trial's newest checkpoint home when it is newer than the last one sent."""
    newest = files.latest_step(spec.checkpoint_path)
    if newest is not None and newest != sent:
        packed = files.pack_checkpoint(spec.checkpoint_path)
        if packed is not None:
            inbox.put((CHECKPOINT_MESSAGE, home_dir, packed))
            return newest
    return sent


def _same_file(out_dir: str, text: str) -> bool:
    try:
        return (Path(out_dir) / launch.SPEC_FILE).read_text() == text
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


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:300] if text else type(err).__name__
