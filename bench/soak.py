"""Endurance: a long campaign killed again and again, with an LLM that fails a third of its calls.

Runs ``recipelab run`` on the ``tiny`` preset for ``--iterations`` proxy trials (default 100)
plus stress runs, as its own process, and SIGKILLs it ``--kills`` times (default 20): most at
random moments while proxies train, the last few during promotion and stress runs. After
each kill the same command is started again, as a user (or systemd) would. The LLM is an
OpenAI-protocol server on loopback that answers every third call with a fault (HTTP 500,
429, or text that is not JSON) and otherwise proposes a random edit.

Prints the kills survived, trials lost, trials duplicated, JSONL/SQLite disagreements and
trials left running (each must be 0), and the orchestrator's resident memory: the first
orchestrator's after its first trial against the last one's when the campaign finishes
(before it draws the report, which loads matplotlib once), and the growth within the
longest-lived orchestrator. Target: growth < 10% for both.

``--executor ray`` runs the campaign on a cluster of two ``ray start`` nodes on this machine
(one CPU each) and spreads the kills over the second node (its process group SIGKILLed while
a proxy or a stress run trains there, then started again) and the orchestrator. It also runs
the same campaign unkilled first, and prints the trials interrupted and re-run, the trainer
processes left alive (orphans) and both wall times.

    python bench/soak.py [--iterations 100] [--kills 20] [--seed 0] [--keep DIR]
                         [--executor local|ray]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from recipelab.proposer import default_space
from recipelab.targets import proxy_recipe

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
fake_openai = importlib.import_module("tests.proposer.fake_openai")
audit_module = importlib.import_module("tests.agent.audit")
ray_nodes = importlib.import_module("tests.agent.ray_nodes")

RSS_GROWTH_TARGET = 0.10
LATE_KILLS = ("promoted", "stress_checkpoint", "stress_checkpoint")
CAMPAIGN = "soak"
PROMOTE = 3
NODE_PROXY, NODE_STRESS = "node-proxy", "node-stress"  # kill the second Ray node meanwhile


@dataclass(frozen=True)
class KillPoint:
    """Kill once ``phase`` is reached (``trials``: the ``count``-th trial has started), after
    ``delay_s`` more seconds."""

    phase: str
    count: int
    delay_s: float


@dataclass
class Segment:
    """One orchestrator process, from start to its kill or its end."""

    pid: int
    started: float
    started_at: float = field(default_factory=time.time)  # wall clock, to compare with files
    rss: list[tuple[float, int]] = field(default_factory=list)  # (monotonic time, bytes)
    first_trial_rss: int | None = None
    before_report_rss: int | None = None  # the last sample before campaign_finished
    killed: bool = False

    @property
    def life_s(self) -> float:
        return (self.rss[-1][0] - self.started) if self.rss else 0.0


def random_edit(rng: random.Random) -> dict[str, object]:
    """A valid edit of two or three knobs of the tiny proxy's search space."""
    space = default_space(proxy_recipe("tiny"))
    edit: dict[str, object] = {}
    for knob in rng.sample(list(space.knobs), rng.randint(2, 3)):
        if knob.choices is not None:
            edit[knob.name] = rng.choice(knob.choices)
        else:
            assert knob.low is not None and knob.high is not None
            if knob.log:
                value = math.exp(rng.uniform(math.log(knob.low), math.log(knob.high)))
            else:
                value = rng.uniform(knob.low, knob.high)
            edit[knob.name] = round(value) if knob.integer else float(f"{value:.4g}")
    return edit


def llm_script(rng: random.Random, calls: int) -> list[object]:
    """Every third call a fault (500, 429 with Retry-After, or not JSON); the rest steer the
    sampler (``--proposer llm``): its first candidate with a random change."""
    faults = [fake_openai.error(500, "scripted overload"),
              fake_openai.error(429, "slow down", retry_after="0"),
              fake_openai.text("I think you should raise the learning rate!")]
    return [faults[(i // 3) % len(faults)] if i % 3 == 2
            else fake_openai.steered(1, [{"knob": knob, "value": value}
                                         for knob, value in random_edit(rng).items()],
                                     "a random change of the soak's LLM")
            for i in range(calls)]


def events(directory: Path, name: str) -> int:
    path = directory / "events.jsonl"
    if not path.exists():
        return 0
    count = 0
    with path.open() as handle:
        for line in handle:
            count += f'"event": "{name}"' in line or f'"event":"{name}"' in line
    return count


def stress_checkpoints(directory: Path) -> set[tuple[str, str]]:
    found = set()
    for latest in (directory / "trials").glob("stress-*/checkpoint/latest"):
        try:
            found.add((latest.parent.parent.name, latest.read_text()))
        except OSError:
            continue
    return found


class Soak:
    def __init__(self, args: argparse.Namespace, root: Path, base_url: str,
                 cluster: Any = None) -> None:
        self.args = args
        self.root = root
        self.directory = root / "campaigns" / CAMPAIGN
        self.rng = random.Random(args.seed)
        self.command = [sys.executable, "-m", "recipelab", "run", "--name", CAMPAIGN,
                        "--preset", "tiny", "--iterations", str(args.iterations),
                        "--promote", str(PROMOTE), "--stress-steps", "150", "--proposer", "llm",
                        "--llm-base-url", base_url, "--trial-timeout", "300"]
        self.cluster = cluster  # tests.agent.ray_nodes.TwoNodes, for --executor ray
        if cluster is not None:
            self.command += ["--executor", "ray", "--ray-address", cluster.address,
                             "--parallel", "2"]
        self.segments: list[Segment] = []
        self.node_kills = 0

    def start(self) -> tuple[subprocess.Popen[bytes], Segment]:
        log = (self.root / "orchestrator.log").open("ab")
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        process = subprocess.Popen(self.command, cwd=self.root, stdout=log, stderr=log, env=env)
        segment = Segment(pid=process.pid, started=time.monotonic())
        self.segments.append(segment)
        return process, segment

    def sample(self, process: subprocess.Popen[bytes], segment: Segment, finished_before: int) -> None:
        try:
            rss = psutil.Process(process.pid).memory_info().rss
        except psutil.Error:
            return
        if rss == 0:  # exited, not yet reaped
            return
        if segment.before_report_rss is None and events(self.directory, "campaign_finished"):
            segment.before_report_rss = segment.rss[-1][1] if segment.rss else rss
        segment.rss.append((time.monotonic(), rss))
        if segment.first_trial_rss is None and events(self.directory, "trial_finished") > finished_before:
            segment.first_trial_rss = rss

    def run_until(self, process: subprocess.Popen[bytes], segment: Segment,
                  condition: Callable[[], bool] | None) -> bool:
        """Sample until ``condition()`` holds (True) or the process exits (False)."""
        finished_before = events(self.directory, "trial_finished")
        while process.poll() is None:
            self.sample(process, segment, finished_before)
            if condition is not None and condition():
                return True
            time.sleep(0.25)
        return False

    def kill(self, process: subprocess.Popen[bytes], segment: Segment) -> None:
        children = psutil.Process(process.pid).children(recursive=True)
        process.send_signal(signal.SIGKILL)
        process.wait()
        psutil.wait_procs(children, timeout=120)
        segment.killed = True

    def kill_points(self) -> list[KillPoint]:
        """Random trial counts and delays while proxies train, then the late phases; the
        last 40% of the proxy trials run in one orchestrator, to measure its memory. On a
        cluster every other early kill is the second node's, and so is one in the stress runs."""
        if not self.args.kills:
            return []
        late = LATE_KILLS if self.cluster is None else (*LATE_KILLS, NODE_STRESS)
        early = max(0, self.args.kills - len(late))
        counts = sorted(self.rng.randint(1, max(1, int(self.args.iterations * 0.6)))
                        for _ in range(early))
        return ([KillPoint(NODE_PROXY if self.cluster is not None and i % 2 else "trials",
                           count, self.rng.uniform(0.0, 3.0)) for i, count in enumerate(counts)]
                + [KillPoint(phase, 0, self.rng.uniform(0.0, 1.0)) for phase in late])

    def condition(self, point: KillPoint) -> Callable[[], bool]:
        if point.phase in (NODE_PROXY, NODE_STRESS):
            prefixes = ("p",) if point.phase == NODE_PROXY else ("rung-", "stress-")
            return lambda: (events(self.directory, "trial_started") >= point.count
                            and self.training_on_worker(prefixes))
        if point.phase == "trials":
            return lambda: events(self.directory, "trial_started") >= point.count
        if point.phase == "stress_checkpoint":
            before = stress_checkpoints(self.directory)
            return lambda: bool(stress_checkpoints(self.directory) - before)
        seen = events(self.directory, point.phase)
        return lambda: events(self.directory, point.phase) > seen

    def training_on_worker(self, prefixes: tuple[str, ...]) -> bool:
        """Whether a trial whose folder starts with one of ``prefixes`` trains on the second
        node now, started by the orchestrator that runs now."""
        found = ray_nodes.training_on(self.directory / "trials", self.cluster.worker_label(),
                                      since=self.segments[-1].started_at)
        return found is not None and str(found[0]).startswith(prefixes)

    def go(self) -> int:
        kills = 0
        process, segment = self.start()
        for point in self.kill_points():
            if not self.run_until(process, segment, self.condition(point)):
                break  # the campaign finished first
            if point.phase not in (NODE_PROXY, NODE_STRESS):
                deadline = time.monotonic() + point.delay_s
                while time.monotonic() < deadline and process.poll() is None:
                    self.sample(process, segment, 0)
                    time.sleep(0.1)
            if process.poll() is not None:
                break
            kills += 1
            if point.phase in (NODE_PROXY, NODE_STRESS):
                victim = self.cluster.worker_label()
                self.cluster.worker.kill()
                self.node_kills += 1
                print(f"kill {kills:2d}: {point.phase} {point.count or ''}, node {victim}",
                      flush=True)
                self.cluster.restart_worker()
                continue
            self.kill(process, segment)
            print(f"kill {kills:2d}: {point.phase} {point.count or ''} +{point.delay_s:.1f} s, "
                  f"pid {segment.pid}", flush=True)
            process, segment = self.start()
        self.run_until(process, segment, None)
        if process.returncode != 0:
            raise SystemExit(f"the final run exited with {process.returncode}; "
                             f"see {self.root / 'orchestrator.log'}")
        return kills


def orphans(directory: Path) -> int:
    """Trainer processes a Ray task started (its ``worker.json``) still alive after the
    campaign ended: each should have died with its task, its node or the campaign."""
    alive = 0
    for said in (directory / "trials").glob("*/worker.json"):
        with contextlib.suppress(ValueError, OSError, psutil.Error):
            process = psutil.Process(json.loads(said.read_text())["trainer_pid"])
            alive += (process.status() != psutil.STATUS_ZOMBIE
                      and "recipelab.trainer" in " ".join(process.cmdline()))
    return alive


def soak_once(args: argparse.Namespace, root: Path, cluster: Any) -> tuple[Soak, int, float, Any]:
    """One campaign under ``args.kills`` kills, with its own scripted LLM."""
    server = fake_openai.FakeOpenAI().start()
    server.script(*llm_script(random.Random(args.seed), calls=20 * args.iterations))
    root.mkdir(parents=True, exist_ok=True)
    soak = Soak(args, root, server.base_url, cluster)
    began = time.monotonic()
    kills = soak.go()
    wall = time.monotonic() - began
    server.stop()
    return soak, kills, wall, server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="run in this directory and keep it")
    parser.add_argument("--executor", choices=("local", "ray"), default="local")
    args = parser.parse_args()

    root = args.keep or Path(tempfile.mkdtemp(prefix="recipelab-soak-"))
    cluster, port, unkilled_wall = None, 0, None
    if args.executor == "ray":
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        cluster = ray_nodes.start_two_nodes(port)
    try:
        if cluster is not None:
            _, _, unkilled_wall, _ = soak_once(argparse.Namespace(**{**vars(args), "kills": 0}),
                                               root / "unkilled", cluster)
        soak, kills, wall, server = soak_once(args, root, cluster)
        left_alive = orphans(soak.directory) if cluster is not None else 0
    finally:
        if cluster is not None:
            ray_nodes.stop_two_nodes(cluster, port)

    books = audit_module.audit(soak.directory, CAMPAIGN)
    chats = server.chat_requests()
    fallbacks = events(soak.directory, "llm_fallback")
    first, last = soak.segments[0], soak.segments[-1]
    longest = max(soak.segments, key=lambda s: s.life_s)
    # The first orchestrator that finished a trial: one killed before that has barely started.
    start_rss = next((s.first_trial_rss for s in soak.segments if s.first_trial_rss),
                     first.rss[0][1])
    end_rss = last.before_report_rss or last.rss[-1][1]
    after_report_rss = last.rss[-1][1]
    long_start = longest.first_trial_rss or longest.rss[0][1]
    long_end = longest.rss[-1][1]
    figures = {
        "iterations": args.iterations,
        "kills_survived": kills,
        "trials_lost": len(books.lost),
        "trials_duplicated": len(books.duplicated),
        "jsonl_sqlite_disagreements": len(books.disagreements),
        "trials_left_running": len(books.running),
        "proxy_trials_trained": len(books.trained("proxy")),
        "stress_runs_trained": len(books.trained("stress")),
        "interrupted_records": sum(r["status"] == "interrupted" for r in books.records),
        "llm_calls": len(chats),
        "llm_fallbacks": fallbacks,
        "orchestrator_rss_start_mib": round(start_rss / 2**20, 1),
        "orchestrator_rss_end_mib": round(end_rss / 2**20, 1),
        "orchestrator_rss_after_report_mib": round(after_report_rss / 2**20, 1),
        "rss_growth": round(end_rss / start_rss - 1, 4),
        "longest_orchestrator_s": round(longest.life_s, 1),
        "longest_orchestrator_rss_growth": round(long_end / long_start - 1, 4),
        # where in its life it grew: its RSS at 0, 25, 50, 75 and 100% of its samples
        "longest_orchestrator_rss_mib": [
            round(longest.rss[min(len(longest.rss) - 1, i * len(longest.rss) // 4)][1] / 2**20, 1)
            for i in range(5)],
        "wall_s": round(wall, 1),
    }
    if cluster is not None:
        figures.update({
            "node_kills": soak.node_kills,
            # a node's death interrupts with this message; an orchestrator's leaves none
            "node_kills_mid_trial": sum(r["status"] == "interrupted"
                                        and "lost its Ray worker" in (r.get("message") or "")
                                        for r in books.records),
            "orchestrator_kills": kills - soak.node_kills,
            "re_runs": sum(bool(r["retry_of"]) for r in books.records),
            "orphans": left_alive,
            "wall_unkilled_s": round(unkilled_wall or 0.0, 1),
        })
    print(json.dumps(figures, indent=2))
    ok = (books.clean and kills >= min(args.kills, 20) and left_alive == 0
          and figures["proxy_trials_trained"] >= args.iterations
          and figures["stress_runs_trained"] >= PROMOTE
          and figures["rss_growth"] < RSS_GROWTH_TARGET
          and figures["longest_orchestrator_rss_growth"] < RSS_GROWTH_TARGET)
    print(f"soak: {'PASS' if ok else 'FAIL'}; campaign in {root}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
