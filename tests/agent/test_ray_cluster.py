"""``recipelab run --executor ray --ray-address HOST:PORT`` joins a cluster ``ray start`` set up."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import read_jsonl, run_cli, wait_for

RAY = str(Path(sys.executable).with_name("ray"))
CURRENT_CLUSTER = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"  # what `auto` reads


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def head_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A head node as a user starts one (``ray start --head``), with 2 CPUs.

    ``--block`` keeps it in the foreground, so ending that one process ends the node.
    """
    port = free_port()
    logs = tmp_path_factory.mktemp("ray-head") / "head.log"
    with logs.open("w") as log:
        head = subprocess.Popen(
            [RAY, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
             "--include-dashboard=false", "--disable-usage-stats"],
            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "Ray runtime started" in logs.read_text() or head.poll() is not None,
                 timeout_s=120)
        assert head.poll() is None, logs.read_text()
        # The address it tells other machines to join with (ray start --address='IP:PORT').
        found = re.search(r"--address='([^']+)'", logs.read_text())
        assert found is not None, logs.read_text()
        yield found.group(1)
    finally:
        head.terminate()
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
        # `ray stop` would remove the address file `auto` reads; this node is gone, so must it be.
        current = CURRENT_CLUSTER.read_text().strip() if CURRENT_CLUSTER.exists() else ""
        if current.endswith(f":{port}"):
            CURRENT_CLUSTER.unlink()


def test_a_campaign_runs_its_trials_on_a_running_ray_cluster(tmp_path: Path, head_node: str) -> None:
    process = run_cli("run", "--name", "cluster", "--preset", "tiny", "--iterations", "3",
                      "--promote", "0", "--noise-seeds", "1", "--proposer", "classical",
                      "--executor", "ray", "--ray-address", head_node, "--parallel", "2",
                      cwd=tmp_path)
    output, _ = process.communicate(timeout=280)

    assert process.returncode == 0, output
    lines = read_jsonl(tmp_path / "campaigns" / "cluster" / "trajectory.jsonl")
    assert [r["status"] for r in lines] == ["complete"] * 3
    settings = json.loads((tmp_path / "campaigns" / "cluster" / "settings.json").read_text())
    assert settings["executor"]["kind"] == "ray" and head_node in settings["executor"]["ray_address"]
