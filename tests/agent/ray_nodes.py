"""A Ray cluster of two nodes on this machine, started as a user starts one.

``ray start --head`` and ``ray start --address HEAD`` each run in the foreground
(``--block``) in a session of their own, so that killing one process group kills that node
(its raylet, its object store and its workers) and nothing else. Each node gets one CPU and
its own temp dir, so the two are separate raylets.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from recipelab.runner.ray import WORKER_FILE, node_label

from .conftest import wait_for

RAY = str(Path(sys.executable).with_name("ray"))
CURRENT_CLUSTER = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"  # what `auto` reads
START_TIMEOUT_S = 120.0
# A cluster's nodes join with the head's token; `ray start --head` turns token auth on.
TOKEN_AUTH = {"RAY_AUTH_MODE": "token"}


@dataclass
class Node:
    """One ``ray start --block`` process and its node; ``temp_dir`` tells the node apart."""

    process: subprocess.Popen[bytes]
    log: Path
    temp_dir: Path

    def kill(self) -> None:
        """SIGKILL the node's whole process group, as a machine that loses power."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()


def start_node(args: list[str], temp_dir: Path, log: Path) -> Node:
    """``ray start ARGS --block`` in its own session, waited for until it runs."""
    with log.open("w") as out:
        process = subprocess.Popen(
            [RAY, "start", "--block", "--num-cpus=1", f"--temp-dir={temp_dir}",
             "--disable-usage-stats", *args],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **TOKEN_AUTH})
    node = Node(process, log, temp_dir)
    wait_for(lambda: "block forever" in log.read_text() or process.poll() is not None,
             timeout_s=START_TIMEOUT_S)
    if process.poll() is not None:
        pytest.skip(f"'ray start' could not start a node here:\n{log.read_text()[-2000:]}")
    return node


def node_ids(address: str) -> dict[str, str]:
    """Each live node's id by the temp dir its raylet runs in, asked of the cluster."""
    script = (
        "import json, ray\n"
        f"ray.init(address={address!r}, log_to_driver=False, configure_logging=False)\n"
        "print(json.dumps({n['NodeID']: n['RayletSocketName'] for n in ray.nodes() "
        "if n['Alive']}))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=True, env={**os.environ, **TOKEN_AUTH})
    sockets: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return sockets


@dataclass
class TwoNodes:
    head: Node
    worker: Node
    address: str
    root: Path
    worker_id: str = ""  # the second node's id; a node started again has a new one

    def find_worker_id(self, not_: str = "") -> str:
        """The second node's id, once the cluster knows it alive (``not_``: an old id the
        cluster may still think alive)."""
        found: list[str] = []

        def alive() -> bool:
            found[:] = [node_id for node_id, socket in node_ids(self.address).items()
                        if socket.startswith(str(self.worker.temp_dir)) and node_id != not_]
            return len(found) == 1

        wait_for(alive, timeout_s=START_TIMEOUT_S)
        return found[0]

    def worker_label(self) -> str:
        """The second node as records name it."""
        return node_label(socket.gethostname(), self.worker_id)

    def restart_worker(self) -> None:
        """Start the second node again (after :meth:`Node.kill`), as a user would."""
        self.worker = start_node([f"--address={self.address}"], self.worker.temp_dir,
                                 self.root / "worker-again.log")
        self.worker_id = self.find_worker_id(not_=self.worker_id)


def start_two_nodes(port: int) -> TwoNodes:
    # Short paths: a node's sockets live in its temp dir, and Unix socket paths are short.
    root = Path(tempfile.mkdtemp(prefix="rn", dir="/tmp"))
    head = start_node(["--head", f"--port={port}", "--include-dashboard=false"], root / "h",
                      root / "head.log")
    found = re.search(r"--address='([^']+)'", head.log.read_text())
    assert found is not None, head.log.read_text()
    address = found.group(1)
    try:
        worker = start_node([f"--address={address}"], root / "w", root / "worker.log")
    except BaseException:
        head.stop()
        raise
    cluster = TwoNodes(head, worker, address, root)
    cluster.worker_id = cluster.find_worker_id()
    return cluster


def stop_two_nodes(cluster: TwoNodes, port: int) -> None:
    cluster.worker.stop()
    cluster.head.stop()
    # `ray stop` would remove the address file `auto` reads; this cluster is gone, so must it be.
    current = CURRENT_CLUSTER.read_text().strip() if CURRENT_CLUSTER.exists() else ""
    if current.endswith(f":{port}"):
        CURRENT_CLUSTER.unlink()
    shutil.rmtree(cluster.root, ignore_errors=True)


def training_on(trials: Path, node: str, since: float = 0.0) -> tuple[str, dict[str, Any]] | None:
    """A trial whose trainer runs on ``node`` now (its task said so, it has a log and no
    result, and its trainer process lives: a killed orchestrator's trials leave their
    folders behind): its folder's name and the task's ``worker.json``. ``since`` (a
    ``time.time()``): only a task that wrote its ``worker.json`` after it, so that a trial
    of an orchestrator killed before then, whose trainer Ray is still ending, is not taken
    for one that trains."""
    for worker in trials.glob(f"*/{WORKER_FILE}"):
        out_dir = worker.parent
        try:
            said = json.loads(worker.read_text())
            written = worker.stat().st_mtime
        except (ValueError, OSError):
            continue  # being written
        if (said.get("node") == node and written >= since and (out_dir / "trial.log").exists()
                and not (out_dir / "result.json").exists() and alive(said["trainer_pid"])):
            return out_dir.name, said
    return None


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie has ended)."""
    try:
        status: str = psutil.Process(pid).status()
    except psutil.Error:
        return False
    return bool(status != psutil.STATUS_ZOMBIE)
