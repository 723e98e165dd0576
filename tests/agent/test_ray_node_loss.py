"""A cluster that loses a node: two Ray nodes, one killed mid-trial, nothing lost.

The campaign runs as a user runs it (``recipelab run --executor ray --ray-address HEAD``,
records in PostgreSQL) on two nodes ``ray start`` set up; the test SIGKILLs the second
node's process group while a trial trains there, then starts that node again. A run that
trains in scratch on the lost node is checked on the executor itself: no CLI option makes a
node on this machine blind to the campaign directory.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from recipelab.runner.files import read_node
from recipelab.runner.ray import node_label
from recipelab.trainer.spec import CorpusSpec
from tests.postgres import postgres_database, postgres_server

from .conftest import read_jsonl, wait_for
from .ray_nodes import TwoNodes, alive, node_ids, start_two_nodes, stop_two_nodes, training_on
from .test_ray_cluster import free_port

__all__ = ["postgres_database", "postgres_server"]

CAMPAIGN_TIMEOUT_S = 420


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[TwoNodes]:
    port = free_port()
    cluster = start_two_nodes(port)
    try:
        yield cluster
    finally:
        stop_two_nodes(cluster, port)


TOP_RUNG = ("--promote", "1", "--top-seeds", "2", "--stress-steps", "300", "--rung-size", "0",
            "--close-call-seeds", "0", "--no-attribution", "--no-width-rung")
"""A short ladder: the finalist and the baseline at 2 seeds and 3 rates, 300 steps each."""


def run_command(address: str, db: str, ladder: Sequence[str] = ("--promote", "0")) -> list[str]:
    """The campaign the tests run, as a user types it: proxy trials only, or ``ladder``."""
    return [sys.executable, "-m", "recipelab", "run", "--name", "lost", "--preset", "tiny",
            "--iterations", "10", *ladder, "--noise-seeds", "1",
            "--proposer", "classical", "--executor", "ray", "--ray-address", address,
            "--parallel", "2", "--store.db", db]


def recipelab(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "recipelab", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "COLUMNS": "200"})


@pytest.mark.parametrize("kind", ["proxy", "stress"])
def test_a_node_killed_mid_trial_loses_nothing_and_comes_back_to_work(
        tmp_path: Path, two_nodes: TwoNodes, postgres_database: str, kind: str) -> None:
    """The node dies under a proxy trial, or under a top-rung run (which resumes from its
    checkpoint)."""
    worker = two_nodes.worker_label()
    trials = tmp_path / "campaigns" / "lost" / "trials"
    seen: dict[str, object] = {}

    def kill_the_worker_node() -> None:
        def spotted() -> bool:
            found = training_on(trials, worker)
            if found is not None and found[0].startswith(kind[0]):  # p0003, s0001
                seen.update(victim=found[0], pids=found[1])
                return True
            return False

        wait_for(spotted, timeout_s=CAMPAIGN_TIMEOUT_S)
        two_nodes.worker.kill()
        seen["killed"] = True
        two_nodes.restart_worker()
        seen["back"] = two_nodes.worker_label()

    killer = threading.Thread(target=kill_the_worker_node, daemon=True)
    killer.start()
    console = tmp_path / "console.log"
    ladder = TOP_RUNG if kind == "stress" else ("--promote", "0")
    with console.open("w") as out:
        done = subprocess.run(run_command(two_nodes.address, postgres_database, ladder),
                              cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                              timeout=CAMPAIGN_TIMEOUT_S, check=False)
    killer.join(timeout=120)
    assert done.returncode == 0, console.read_text()[-4000:]
    assert seen.get("killed"), "no trial was ever seen training on the second node"

    lines = read_jsonl(tmp_path / "campaigns" / "lost" / "trajectory.jsonl")
    by_id = {r["trial_id"]: r for r in lines}
    assert len(by_id) == len(lines), "a trial recorded twice"
    # the first attempt trained in that folder (a top-rung run's re-run resumes in it)
    victim = min((r for r in lines if Path(r["artifacts"].get("dir", "")).name == seen["victim"]),
                 key=lambda r: r["trial_id"])
    assert victim["status"] == "interrupted" and victim["kind"] == kind, victim
    assert victim["metrics"]["node"] == worker and worker in victim["message"]
    reruns = [r for r in lines if r["retry_of"] == victim["trial_id"]]
    assert len(reruns) == 1 and reruns[0]["status"] == "complete", reruns
    assert reruns[0]["fingerprint"] == victim["fingerprint"]
    assert reruns[0]["metrics"]["node"] != worker, "re-run on the node that died"
    trained = [r for r in lines if r["kind"] == "proxy" and r["status"] == "complete"]
    assert len(trained) == 10, "the campaign did not finish its trials on the survivors"
    # Every trial names its node, and the node that came back got work again.
    nodes = {r["metrics"]["node"] for r in lines if r["status"] == "complete"}
    assert None not in nodes and len(nodes - {worker}) == 2, nodes  # the head, the node back
    assert seen.get("back") in nodes, f"the restarted node {seen.get('back')} got no trial"

    check = recipelab("db", "check", "lost", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    status = recipelab("status", "lost", cwd=tmp_path)
    assert (f"{victim['trial_id']} ({kind}) interrupted on node {worker}: re-run as "
            f"{reruns[0]['trial_id']}") in status.stdout, status.stdout
    pids = seen["pids"]
    assert isinstance(pids, dict)
    wait_for(lambda: not alive(pids["trainer_pid"]), timeout_s=30)


def test_an_orchestrator_killed_while_both_nodes_train_reruns_each_trial_once(
        tmp_path: Path, two_nodes: TwoNodes, postgres_database: str) -> None:
    host = socket.gethostname()
    nodes = {node_label(host, node_id) for node_id in node_ids(two_nodes.address)}
    trials = tmp_path / "campaigns" / "lost" / "trials"
    command = run_command(two_nodes.address, postgres_database)
    with (tmp_path / "first.log").open("w") as out:
        first = subprocess.Popen(command, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    in_flight: dict[str, dict[str, Any]] = {}

    def both_train() -> bool:
        for node in nodes:
            if (found := training_on(trials, node)) is not None:
                in_flight[found[0]] = found[1]
        heard = all(read_node(trials / name) for name in in_flight)  # the orchestrator knows
        return ((len({said["node"] for said in in_flight.values()}) == 2 and heard)
                or first.poll() is not None)

    wait_for(both_train, timeout_s=CAMPAIGN_TIMEOUT_S)
    first.kill()  # SIGKILL: no handler runs, as when the machine running it dies
    first.wait()
    assert len(in_flight) >= 2, "the campaign ended before trials ran on both nodes at once"
    # Ray ends a dead driver's tasks, and a trainer dies with its task's worker.
    trainers = [said["trainer_pid"] for said in in_flight.values()]
    wait_for(lambda: not any(alive(pid) for pid in trainers), timeout_s=60)

    with (tmp_path / "second.log").open("w") as out:
        again = subprocess.run(command, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                               timeout=CAMPAIGN_TIMEOUT_S, check=False)
    assert again.returncode == 0, (tmp_path / "second.log").read_text()[-4000:]

    lines = read_jsonl(tmp_path / "campaigns" / "lost" / "trajectory.jsonl")
    by_id = {r["trial_id"]: r for r in lines}
    assert len(by_id) == len(lines), "a trial recorded twice"
    for trial_id in in_flight:
        assert by_id[trial_id]["status"] == "interrupted", by_id[trial_id]
        # its orchestrator died before it could hear the loss; the resumed one names the node
        assert by_id[trial_id]["metrics"]["node"] == in_flight[trial_id]["node"]
        reruns = [r for r in lines if r["retry_of"] == trial_id]
        assert len(reruns) == 1 and reruns[0]["status"] == "complete", (trial_id, reruns)
    trained = [r for r in lines if r["kind"] == "proxy" and r["status"] == "complete"]
    assert len(trained) == 10
    check = recipelab("db", "check", "lost", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


SCRATCH_RUN = """
import json, os, signal, sys, time
from pathlib import Path
from recipelab.runner.files import latest_step, read_node
from recipelab.runner.ray import RayExecutor
from recipelab.targets import proxy_recipe
from recipelab.trainer.spec import CorpusSpec, TrialSpec

address, worker, worker_group, root, corpus = sys.argv[1:]
executor = RayExecutor(address=address, shared_files=False)
specs = [TrialSpec(trial_id=f"s000{i}", kind="stress", out_dir=f"{root}/s000{i}",
                   corpus=CorpusSpec.model_validate_json(corpus), checkpoint_every=5,
                   recipe=proxy_recipe("tiny").apply({"steps": 100_000, "seed": i}))
         for i in range(2)]  # one task per node: each node has one CPU
handles = [executor.submit(spec, timeout_s=420) for spec in specs]
victim, deadline = None, time.monotonic() + 120
while victim is None:  # a run on the worker node, with a checkpoint home
    assert time.monotonic() < deadline, "no run on the worker node sent a checkpoint home"
    assert all(executor.poll(h) is None for h in handles), "a run ended before the kill"
    victim = next((h for h in handles if read_node(Path(h.spec.out_dir)) == worker
                   and latest_step(h.spec.checkpoint_path)), None)
    time.sleep(0.2)
for other in handles:
    if other is not victim:
        executor.cancel(other)
        executor.wait(other)  # the survivor's CPU is free for the re-run
os.killpg(int(worker_group), signal.SIGKILL)
lost = executor.wait(victim)
home = victim.spec.checkpoint_path
kept = latest_step(home)
step = int(kept.removeprefix("step-"))
whole = sorted(path.name for path in (home / kept).iterdir())  # before the re-run replaces it
again = victim.spec.model_copy(update={"recipe": victim.spec.recipe.apply({"steps": step + 10})})
result = executor.wait(executor.submit(again, resume=True, timeout_s=420))
executor.close()
print(json.dumps({"lost": [lost.status, lost.node], "kept": step,
                  "whole": whole,
                  "resumed": [result.status, result.message, result.resumed_from_step, result.node]}))
"""


def test_a_run_in_scratch_on_the_lost_node_resumes_from_the_checkpoint_that_came_home(
        tmp_path: Path, two_nodes: TwoNodes, corpus: CorpusSpec) -> None:
    """A stress run on a node that cannot see the campaign directory trains in scratch and
    sends each checkpoint home as it is written. Its node dies: the run is ``interrupted`` on
    that node, the newest checkpoint at home is whole, and the re-run on the survivor resumes
    from exactly it. The executor runs in a process of its own, as in ``recipelab run``: the
    cluster's token must be set before Ray is imported, and this process imported it."""
    worker = two_nodes.worker_label()
    try:
        done = subprocess.run(
            [sys.executable, "-c", SCRATCH_RUN, two_nodes.address, worker,
             str(two_nodes.worker.process.pid), str(tmp_path), corpus.model_dump_json()],
            capture_output=True, text=True, timeout=CAMPAIGN_TIMEOUT_S, check=False)
        assert done.returncode == 0, done.stderr[-4000:]
    finally:
        two_nodes.worker.process.wait(timeout=30)  # the script killed its process group
        two_nodes.restart_worker()
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["lost"] == ["interrupted", worker]
    assert seen["whole"] == ["model.safetensors", "optimizer.safetensors", "rng.safetensors",
                             "state.json"], "the newest checkpoint at home is not whole"
    status, message, resumed_from, node = seen["resumed"]
    assert status == "complete", message
    assert resumed_from == seen["kept"] and node != worker
