"""HybridProposer: the LLM's share of turns, fallback when it is down, and prefetching."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator

import pytest

from recipelab.proposer import (
    PROPOSERS,
    ClassicalProposer,
    HybridProposer,
    Observation,
    Proposal,
    Proposer,
    default_space,
)
from recipelab.proposer.hybrid import MAX_RETRY_PAUSE
from recipelab.proposer.llm import LLMProposer
from recipelab.proposer.llm_endpoint import LLMUnavailable
from recipelab.recipe import FALLBACK_ARTIFACT
from recipelab.targets import proxy_recipe
from tests.proposer.conformance import BASELINE_ID, ProposerConformance, synthetic_history
from tests.proposer.fake_openai import (
    NOT_A_COMPLETION,
    FakeOpenAI,
    fake_openai_fixture,  # noqa: F401 - the `fake` fixture
    fast_config,
    good,
    unused_url,
)

BASELINE = proxy_recipe("tiny")
SPACE = default_space(BASELINE)
CAUSE = "LLM endpoint http://spark:8000/v1: chat completion failed: HTTP 503"


class Recording(Proposer):
    """A stand-in proposer: records each call's history; fails while ``down`` is set."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[list[Observation]] = []
        self.prefetched: list[list[Observation]] = []
        self.down = False

    def propose(self, history: list[Observation], n: int) -> list[Proposal]:
        self.calls.append(history)
        if self.down:
            raise LLMUnavailable(CAUSE)
        edit = {"optimizer.lr": 0.002 + 1e-5 * len(history)}
        return [Proposal.from_edit(BASELINE, None, edit, f"{self.name} idea", self.name)] * n

    def prefetch(self, history: list[Observation]) -> None:
        self.prefetched.append(history)


def trial(i: int, proposer: str = "classical-tpe") -> Observation:
    return Observation(trial_id=f"p{i:04d}", status="complete", knobs=BASELINE.knobs(),
                       val_bpb=2.0, proposer=proposer)


def run(hybrid: HybridProposer, iterations: int) -> list[str]:
    """Drive ``iterations`` proposals, each followed by its trial; who proposed each."""
    history: list[Observation] = []
    who = []
    for i in range(iterations):
        [proposal] = hybrid.propose(list(history), 1)
        who.append(proposal.proposer)
        history.append(trial(i, proposal.proposer))
    return who


@pytest.fixture
def classical() -> Recording:
    return Recording("classical")


@pytest.fixture
def llm() -> Recording:
    return Recording("llm")


class TestHybridConformance(ProposerConformance):
    @pytest.fixture(params=[0.0, 0.3, 1.0])
    def make_proposer(self, request: pytest.FixtureRequest,
                      fake: FakeOpenAI) -> Callable[[], HybridProposer]:
        def make() -> HybridProposer:
            classical = ClassicalProposer(BASELINE, BASELINE_ID, SPACE)
            llm = LLMProposer(fast_config(fake.base_url), BASELINE, BASELINE_ID, SPACE, "toy")
            return HybridProposer(classical, llm, llm_share=request.param)
        return make


def test_the_registry_names_the_hybrid_proposer() -> None:
    assert PROPOSERS["hybrid"] is HybridProposer


def test_the_llm_gets_30_of_100_iterations_spread_evenly(classical: Recording,
                                                         llm: Recording) -> None:
    who = run(HybridProposer(classical, llm, llm_share=0.3), 100)
    turns = [k for k, name in enumerate(who) if name == "llm"]
    assert len(turns) == 30
    assert {b - a for a, b in itertools.pairwise(turns)} <= {3, 4}
    assert all(who[k:k + 10].count("llm") == 3 for k in range(0, 100, 10))


@pytest.mark.parametrize(("share", "turns"), [(0.0, 0), (0.1, 10), (0.5, 50), (1.0, 100)])
def test_the_share_is_exact(classical: Recording, llm: Recording, share: float,
                            turns: int) -> None:
    assert run(HybridProposer(classical, llm, llm_share=share), 100).count("llm") == turns


def test_the_schedule_survives_a_restart(classical: Recording, llm: Recording) -> None:
    history = [trial(0, "baseline"), *(trial(i) for i in range(1, 4))]
    first = HybridProposer(classical, llm).propose(history, 1)
    assert HybridProposer(classical, llm).propose(list(history), 1) == first
    assert first[0].proposer == "llm", "iteration 3 (the baseline not counted) is the LLM's"


def test_the_llm_sees_the_full_history(classical: Recording, llm: Recording) -> None:
    history = synthetic_history(BASELINE, 3)
    HybridProposer(classical, llm).propose(history, 1)
    assert llm.calls == [history]


def test_an_unavailable_llm_falls_back_to_classical_and_says_why(classical: Recording,
                                                                 llm: Recording) -> None:
    llm.down = True
    history = [trial(i) for i in range(3)]
    [proposal] = HybridProposer(classical, llm).propose(history, 1)
    assert proposal.proposer == "classical"
    assert proposal.artifacts[FALLBACK_ARTIFACT] == CAUSE
    assert classical.calls == [history]


def test_after_a_fallback_the_llm_sits_out_then_is_tried_again(classical: Recording,
                                                               llm: Recording) -> None:
    hybrid = HybridProposer(classical, llm, llm_share=0.5, retry_after=3)
    llm.down = True
    history = [trial(i) for i in range(5)]
    assert FALLBACK_ARTIFACT in hybrid.propose(history, 1)[0].artifacts  # iteration 5
    llm.down = False
    who = []
    for k in range(6, 12):
        history.append(trial(k - 1))
        who.append(hybrid.propose(list(history), 1)[0].proposer)
    # 7 would be the LLM's; it sits out 6, 7, 8 and is asked again on 9 and 11
    assert who == ["classical", "classical", "classical", "llm", "classical", "llm"]
    assert len(llm.calls) == 3


def test_each_failure_in_a_row_doubles_the_pause_and_a_valid_reply_resets_it(
        classical: Recording, llm: Recording) -> None:
    """A circuit breaker: the LLM is never dropped for the night, only asked less often while
    it keeps failing, and it gets its full share back at its first valid reply."""
    hybrid = HybridProposer(classical, llm, llm_share=1.0, retry_after=2)
    llm.down = True
    asked = []
    history: list[Observation] = []
    for k in range(40):
        calls = len(llm.calls)
        hybrid.propose(list(history), 1)
        if len(llm.calls) > calls:
            asked.append(k)
        history.append(trial(k))
    # paused 2, 4, 8, 16, then 24 (the cap) iterations after each failure
    assert asked == [0, 3, 8, 17, 34]
    assert not hybrid.llm_up and hybrid.pause() == MAX_RETRY_PAUSE
    llm.down = False
    k = hybrid._llm_paused_until
    proposal = hybrid.propose([trial(i) for i in range(k)], 1)[0]
    assert proposal.proposer == "llm" and hybrid.llm_up and hybrid.pause() == 2


def test_prefetch_starts_the_llm_only_before_its_turn(classical: Recording,
                                                      llm: Recording) -> None:
    hybrid = HybridProposer(classical, llm)
    for k in range(10):
        hybrid.prefetch([trial(i) for i in range(k)])  # trial k is running
    assert [len(history) for history in llm.prefetched] == [2, 5, 8]
    assert classical.prefetched == []


def test_prefetch_skips_turns_the_llm_sits_out(classical: Recording, llm: Recording) -> None:
    hybrid = HybridProposer(classical, llm, llm_share=1.0, retry_after=2)
    llm.down = True
    hybrid.propose([], 1)
    hybrid.prefetch([])
    hybrid.prefetch([trial(0)])
    hybrid.prefetch([trial(0), trial(1)])
    assert [len(history) for history in llm.prefetched] == [2]


@pytest.mark.parametrize(("share", "retry_after"), [(-0.1, 3), (1.5, 3), (0.3, -1)])
def test_invalid_settings_are_refused(classical: Recording, llm: Recording, share: float,
                                      retry_after: int) -> None:
    with pytest.raises(ValueError):
        HybridProposer(classical, llm, llm_share=share, retry_after=retry_after)


# --- with the real LLM proposer ------------------------------------------------------------------


@pytest.fixture
def real_llm(fake: FakeOpenAI) -> Iterator[LLMProposer]:
    proposer = LLMProposer(fast_config(fake.base_url), BASELINE, BASELINE_ID, SPACE, "toy")
    yield proposer
    proposer.close()


def test_prefetch_overlaps_the_llms_latency_with_the_running_trial(
        fake: FakeOpenAI, real_llm: LLMProposer) -> None:
    hybrid = HybridProposer(ClassicalProposer(BASELINE, BASELINE_ID, SPACE), real_llm)
    fake.default = good(delay_s=1.0)
    history = [trial(0, "baseline"), trial(1), trial(2)]
    hybrid.prefetch(history)  # trial 3 runs; iteration 3 is the LLM's
    fake.wait_for_chat_requests(1)
    asked_at = time.monotonic()
    [proposal] = hybrid.propose([*history, trial(3)], 1)
    assert proposal.proposer == "llm:fake-model"
    [request] = fake.chat_requests()
    assert request.at < asked_at


def test_a_real_llm_that_is_down_falls_back(fake: FakeOpenAI) -> None:
    url = unused_url()
    llm = LLMProposer(fast_config(url, readiness_timeout_s=0.1), BASELINE, BASELINE_ID, SPACE,
                      "toy")
    hybrid = HybridProposer(ClassicalProposer(BASELINE, BASELINE_ID, SPACE), llm, llm_share=1.0)
    [proposal] = hybrid.propose([], 1)
    llm.close()
    assert proposal.proposer == "classical-tpe"
    assert proposal.artifacts[FALLBACK_ARTIFACT].startswith(f"LLM endpoint {url}: not ready")


@pytest.mark.parametrize("kind", sorted(NOT_A_COMPLETION))
def test_a_real_llm_that_keeps_answering_what_is_not_a_chat_completion_falls_back(
        fake: FakeOpenAI, real_llm: LLMProposer, kind: str) -> None:
    fake.default = NOT_A_COMPLETION[kind]
    hybrid = HybridProposer(ClassicalProposer(BASELINE, BASELINE_ID, SPACE), real_llm,
                            llm_share=1.0, retry_after=0)
    hybrid.prefetch([])
    [proposal] = hybrid.propose([], 1)
    assert proposal.proposer == "classical-tpe"
    assert "invalid replies: 3 in a row" in proposal.artifacts[FALLBACK_ARTIFACT]


class Broken(Proposer):
    """An LLM proposer with a bug: it raises what it should not."""

    name = "broken"

    def propose(self, history: list[Observation], n: int) -> list[Proposal]:
        raise KeyError("choices")

    def prefetch(self, history: list[Observation]) -> None:
        raise AttributeError("'str' object has no attribute 'choices'")


def test_any_failure_of_the_llm_falls_back_with_its_cause() -> None:
    hybrid = HybridProposer(ClassicalProposer(BASELINE, BASELINE_ID, SPACE), Broken(),
                            llm_share=1.0)
    hybrid.prefetch([])
    [proposal] = hybrid.propose([], 1)
    assert proposal.artifacts[FALLBACK_ARTIFACT] == "KeyError: 'choices'"


def test_a_batch_asks_the_llm_once_for_its_turns_among_the_slots_after_those_in_flight(
        classical: Recording, llm: Recording) -> None:
    hybrid = HybridProposer(classical, llm, llm_share=0.5)
    running = Observation(trial_id="p0002", status="running", knobs=BASELINE.knobs(),
                          proposer="classical")
    # two trials finished and one in flight: the batch covers iterations 3, 4, 5 and 6
    batch = hybrid.propose([trial(0), trial(1), running], 4)
    assert [p.proposer for p in batch] == ["llm", "classical", "llm", "classical"]
    assert len(llm.calls) == 1 and len(classical.calls) == 1
