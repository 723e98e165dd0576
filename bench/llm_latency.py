"""How much a slow LLM adds to each iteration, once its calls overlap training.

Runs two real campaigns of the ``cpu`` preset in temporary directories: one with the
classical proposer alone, one hybrid (the LLM proposes a share of the trials, 30% by
default) against an OpenAI-protocol server on loopback that takes ``--delay`` seconds
(default 2) to answer every request. The hybrid prefetches each LLM proposal while the
previous trial trains, so the model's latency should not show in iteration time.

Recipes differ between the two campaigns, so whole iteration times are not comparable;
what is compared is each iteration's overhead (wall time minus the trainer's own train
and eval time, see ``timing.py``). The figure is the growth of the mean iteration
attributable to the LLM: (hybrid overhead - classical overhead) / classical iteration.
Target: < 3%.

    python bench/llm_latency.py [--iterations 8] [--delay 2.0] [--share 0.3]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from recipelab.agent.campaign import Campaign
from recipelab.agent.setup.settings import CampaignSettings, LadderSettings, WindowSettings
from timing import Iteration, iterations

# The OpenAI-protocol server the tests use, with its scripted (here: slow) replies.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
fake_openai = importlib.import_module("tests.proposer.fake_openai")

TARGET_GROWTH = 0.03


def campaign(settings: CampaignSettings) -> list[Iteration]:
    with tempfile.TemporaryDirectory() as tmp:
        Campaign(settings, Path(tmp), console=Console(stderr=True, quiet=True)).run()
        return iterations(Path(tmp), settings.name)[1:]  # the baseline proposes nothing


def summary(name: str, rows: list[Iteration]) -> tuple[float, float]:
    wall = statistics.mean(r.wall_s for r in rows)
    overhead = statistics.mean(r.overhead_s for r in rows)
    print(f"{name:10} iterations {len(rows):3}  mean iteration {wall:7.2f} s  "
          f"mean overhead {overhead:6.3f} s")
    return wall, overhead


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--delay", type=float, default=2.0)
    parser.add_argument("--share", type=float, default=0.3)
    args = parser.parse_args()

    server = fake_openai.FakeOpenAI().start()
    server.script(*(fake_openai.good({"optimizer.lr": round(0.001 + 0.0007 * i, 6)}, delay_s=args.delay)
                    for i in range(4 * args.iterations)))
    try:
        base = CampaignSettings(name="latency", preset="cpu",
                                window=WindowSettings(iterations=args.iterations),
                                ladder=LadderSettings(promote=0))
        classical = campaign(base.model_copy(update={"proposer": "classical"}))
        hybrid = campaign(base.model_copy(update={
            "proposer": "hybrid", "llm_share": args.share, "llm_base_url": server.base_url,
            "llm_structured_output": "json_schema"}))
        llm_calls = len(server.chat_requests())
    finally:
        server.stop()

    wall, classical_overhead = summary("classical", classical)
    _, hybrid_overhead = summary("hybrid", hybrid)
    growth = (hybrid_overhead - classical_overhead) / wall
    print(f"LLM calls: {llm_calls}, each answered after {args.delay:.1f} s")
    verdict = "target met" if growth < TARGET_GROWTH else "target missed"
    print(f"iteration growth from the LLM: {100 * growth:+.2f}% "
          f"(target < {100 * TARGET_GROWTH:.0f}%): {verdict}")


if __name__ == "__main__":
    main()
