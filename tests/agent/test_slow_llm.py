"""A slow LLM keeps its seat: ``recipelab run`` against a real HTTP server that takes seconds
over every reply neither stalls nor hands the sampler the LLM's turns, and loses no trial."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from recipelab.trainer.spec import CorpusSpec
from tests.proposer.fake_openai import GOOD_CHANGES, TEST_API_KEY, FakeOpenAI, Reply

from .audit import audit
from .conftest import read_jsonl

SLOW_S = 3.0  # longer than a tiny trial: each reply is still on its way while one trains


def slow_steer() -> Reply:
    return Reply(content=json.dumps({"pick": 1, "changes": GOOD_CHANGES,
                                     "hypothesis": "a slow but valid answer"}), delay_s=SLOW_S)


def test_a_server_slow_on_every_reply_keeps_the_llms_seat_and_loses_no_trial(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    server = FakeOpenAI().start()
    server.default = slow_steer()
    directory = tmp_path / "slow"
    try:
        result = subprocess.run(
            [sys.executable, "-m", "recipelab", "run", "--dir", str(directory), "--name", "slow",
             "--preset", "tiny", "--corpus", corpus.source, "--precision", "fp32",
             "--parallel", "1", "--iterations", "6", "--promote", "0", "--noise-seeds", "1",
             "--proposer", "llm", "--llm-base-url", server.base_url],
            capture_output=True, text=True, timeout=600, check=False,
            env={**os.environ, "RECIPELAB_LLM_API_KEY": TEST_API_KEY,
                 "RECIPELAB_CACHE": str(corpus.cache_dir)})
    finally:
        server.stop()

    assert result.returncode == 0, result.stderr[-3000:]
    books = audit(directory, "slow")
    assert books.clean, books
    proxies = [r for r in books.records if r["kind"] == "proxy" and r["status"] != "rejected"]
    assert len(proxies) == 6
    search = [r for r in proxies if r["proposer"] != "baseline"]
    own = [r for r in search if r["proposer"].startswith("llm:")]
    assert len(own) >= 0.8 * len(search), [r["proposer"] for r in search]
    events = read_jsonl(directory / "events.jsonl")
    assert not [e for e in events if e["event"] == "llm_fallback"], "a slow reply is no failure"
    [finished] = [e for e in events if e["event"] == "campaign_finished"]
    assert finished["llm_trials"] == len(own)
