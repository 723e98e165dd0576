"""What the LLM proposer's tests share: the tiny baseline and its space, and proposers built
on the scripted OpenAI-compatible server (``fake``), closed at teardown."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from recipelab.proposer import default_space
from recipelab.proposer.llm import EXCHANGE_ARTIFACT, LLMProposer
from recipelab.targets import proxy_recipe
from tests.proposer.conformance import BASELINE_ID
from tests.proposer.fake_openai import (
    FakeOpenAI,
    fake_openai_fixture,  # noqa: F401 - the `fake` fixture
    fast_config,
)

BASELINE = proxy_recipe("tiny")
SPACE = default_space(BASELINE)
TARGET = "toy: a 7M Llama-shaped model"

MakeLLM = Callable[..., LLMProposer]


@pytest.fixture
def make_llm(fake: FakeOpenAI) -> Iterator[MakeLLM]:
    """Builds proposers on the fake server (or ``base_url``), closing them at teardown."""
    made: list[LLMProposer] = []

    def make(base_url: str | None = None, history_target: str = TARGET,
             **overrides: Any) -> LLMProposer:
        proposer = LLMProposer(fast_config(base_url or fake.base_url, **overrides), BASELINE,
                               BASELINE_ID, SPACE, history_target)
        made.append(proposer)
        return proposer

    yield make
    for proposer in made:
        proposer.close()


def exchange(proposal_artifacts: dict[str, str]) -> dict[str, Any]:
    """The exchange artifact of a proposal: messages, replies, mode and attempts."""
    parsed: dict[str, Any] = json.loads(proposal_artifacts[EXCHANGE_ARTIFACT])
    return parsed
