"""The LLM's endpoint against a real HTTP server scripted with the faults real servers
produce: readiness, retries, structured-output modes, the key and the URL's credentials."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from recipelab.proposer.llm import LLMProposer
from recipelab.proposer.llm_endpoint import LLMConfig, LLMUnavailable, decoding_schema
from recipelab.proposer.llm_reply import edit_model
from recipelab.redaction import redact_url
from tests.proposer.conformance import BASELINE_ID, synthetic_history
from tests.proposer.conftest import BASELINE, SPACE, TARGET, MakeLLM, exchange
from tests.proposer.fake_openai import (
    GOOD_EDIT,
    TEST_API_KEY,
    FakeOpenAI,
    error,
    fast_config,
    good,
    hang,
    refuse_guided_json,
    refuse_response_format,
    text,
    unused_url,
)

# --- readiness -------------------------------------------------------------------------------


@pytest.mark.parametrize(("health", "ready_route"), [
    ({"/v1/health/ready": 200}, "/v1/health/ready"),  # NIM
    ({"/health": 200}, "/health"),  # llama.cpp, vLLM
    ({}, "/v1/models"),  # Ollama: neither health route
])
def test_readiness_is_understood_for_each_kind_of_server(
        fake: FakeOpenAI, make_llm: MakeLLM, health: dict[str, int], ready_route: str) -> None:
    fake.health = health
    make_llm(model="m").propose([], 1)
    first_chat = fake.chat_requests()[0]
    routes = [r.path for r in fake.received if r.at < first_chat.at]
    assert routes[-1] == ready_route


def test_readiness_waits_while_the_model_loads(fake: FakeOpenAI, make_llm: MakeLLM) -> None:
    fake.loading_probes = 3
    assert make_llm().propose([], 1)
    assert len(fake.requests_to("/health")) == 4


def test_a_server_that_never_gets_ready_is_unavailable(fake: FakeOpenAI,
                                                       make_llm: MakeLLM) -> None:
    fake.health = {"/health": 503}
    with pytest.raises(LLMUnavailable, match=r"not ready after 0.2 s .*/health → 503"):
        make_llm(readiness_timeout_s=0.2).propose([], 1)
    assert fake.chat_requests() == []


def test_only_the_first_call_waits_for_readiness_and_a_later_one_looks_once(
        fake: FakeOpenAI, make_llm: MakeLLM) -> None:
    """A server loading its model is waited for once; after that the campaign's circuit
    breaker spaces the retries, so a later turn costs one round of probes, not the wait."""
    fake.health = {"/health": 503}
    llm = make_llm(readiness_timeout_s=1.0, readiness_poll_s=0.1)
    with pytest.raises(LLMUnavailable, match="not ready after 1 s"):
        llm.propose([], 1)
    waited = len(fake.requests_to("/health"))
    assert waited >= 5
    with pytest.raises(LLMUnavailable, match="not ready at a second look"):
        llm.propose([], 1)
    assert len(fake.requests_to("/health")) == waited + 1
    fake.health = {}
    assert llm.propose([], 1), "the seat comes back at the first look that finds it ready"


def test_a_refused_connection_is_unavailable_and_names_the_endpoint(make_llm: MakeLLM) -> None:
    url = unused_url()
    with pytest.raises(LLMUnavailable, match="Connection refused") as caught:
        make_llm(url, readiness_timeout_s=0.1).propose([], 1)
    assert str(caught.value).startswith(f"LLM endpoint {url}: not ready")


def test_a_server_that_stops_mid_campaign_is_unavailable(fake: FakeOpenAI,
                                                         make_llm: MakeLLM) -> None:
    proposer = make_llm()
    proposer.propose([], 1)
    fake.stop()
    with pytest.raises(LLMUnavailable, match=r"cannot connect .*gave up after 4 attempts"):
        proposer.propose([], 1)



# --- transient errors are retried --------------------------------------------------------------


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503])
def test_a_transient_error_is_retried(fake: FakeOpenAI, make_llm: MakeLLM, status: int) -> None:
    fake.script(error(status), error(status), good())
    [proposal] = make_llm().propose([], 1)
    assert proposal.edit == GOOD_EDIT
    assert len(fake.chat_requests()) == 3


def test_retries_give_up_with_the_endpoint_and_the_cause(fake: FakeOpenAI,
                                                         make_llm: MakeLLM) -> None:
    fake.script(*[error(500, "CUDA out of memory")] * 4)
    with pytest.raises(LLMUnavailable) as caught:
        make_llm().propose([], 1)
    message = str(caught.value)
    assert message.startswith(f"LLM endpoint {fake.base_url}: chat completion failed: HTTP 500")
    assert "CUDA out of memory" in message and "gave up after 4 attempts" in message
    assert len(fake.chat_requests()) == 4


def test_a_429_waits_as_long_as_retry_after_asks(fake: FakeOpenAI, make_llm: MakeLLM) -> None:
    fake.script(error(429, retry_after="1"), good())
    make_llm().propose([], 1)
    first, second = fake.chat_requests()
    assert second.at - first.at >= 0.9


@pytest.mark.timeout(20)
def test_retry_after_is_capped(fake: FakeOpenAI, make_llm: MakeLLM) -> None:
    fake.script(error(429, retry_after="3600"), good())
    assert make_llm(retry_after_max_s=0.05).propose([], 1)


def test_a_reply_slower_than_the_timeout_is_retried(fake: FakeOpenAI, make_llm: MakeLLM) -> None:
    fake.script(hang(1.0), good(hypothesis="the second try"))
    [proposal] = make_llm(request_timeout_s=0.3).propose([], 1)
    assert proposal.hypothesis == "the second try"
    assert len(fake.chat_requests()) == 2


def test_a_server_that_keeps_hanging_is_unavailable(fake: FakeOpenAI, make_llm: MakeLLM) -> None:
    fake.script(*[hang(1.0)] * 2)
    with pytest.raises(LLMUnavailable, match=r"no reply within 0.2 s \(gave up after 2 attempts"):
        make_llm(request_timeout_s=0.2, max_retries=1).propose([], 1)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_a_client_error_is_not_retried(fake: FakeOpenAI, make_llm: MakeLLM, status: int) -> None:
    fake.script(error(status, "you asked wrongly"))
    with pytest.raises(LLMUnavailable, match=f"HTTP {status}: .*you asked wrongly"):
        make_llm().propose([], 1)
    assert len(fake.chat_requests()) == 1



# --- structured output modes ---------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "path"), [
    ("json_schema", ("response_format", "json_schema", "schema")),
    ("json_object", ("response_format", "schema")),
    ("guided_json", ("guided_json",)),
    ("nvext", ("nvext", "guided_json")),
])
def test_each_mode_sends_the_schema_its_own_way(fake: FakeOpenAI, make_llm: MakeLLM,
                                                mode: str, path: tuple[str, ...]) -> None:
    make_llm(structured_output=mode).propose([], 1)
    sent: Any = fake.chat_requests()[0].body
    for key in path:
        sent = sent[key]
    assert sent == decoding_schema(edit_model(SPACE).model_json_schema())


def test_the_schema_sent_for_decoding_is_plain_and_still_bounds_every_knob() -> None:
    sent = decoding_schema(edit_model(SPACE).model_json_schema())
    text = json.dumps(sent)
    assert "$ref" not in text and "anyOf" not in text and "pattern" not in text
    knobs = sent["properties"]["edit"]["properties"]
    assert set(knobs) == set(SPACE.names())
    assert all("minimum" in knobs[k.name] and "maximum" in knobs[k.name]
               for k in SPACE.knobs if k.choices is None)
    assert sent["required"] == ["edit", "hypothesis"]


def test_json_schema_mode_asks_for_strict_output(fake: FakeOpenAI, make_llm: MakeLLM) -> None:
    make_llm(structured_output="json_schema").propose([], 1)
    response_format = fake.chat_requests()[0].body["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["name"] == "edit"
    assert response_format["json_schema"]["strict"] is True


def test_prompt_mode_sends_no_constraint(fake: FakeOpenAI, make_llm: MakeLLM) -> None:
    make_llm(structured_output="prompt").propose([], 1)
    assert not {"response_format", "guided_json", "nvext"} & set(fake.chat_requests()[0].body)


def test_auto_falls_back_to_guided_json_then_prompt_and_remembers(fake: FakeOpenAI,
                                                                  make_llm: MakeLLM) -> None:
    fake.script(refuse_response_format(), refuse_guided_json())
    proposer = make_llm()
    [first] = proposer.propose([], 1)
    proposer.propose([], 1)
    bodies = [r.body for r in fake.chat_requests()]
    assert ["response_format" in b for b in bodies] == [True, False, False, False]
    assert ["guided_json" in b for b in bodies] == [False, True, False, False]
    record = exchange(first.artifacts)
    assert record["mode"] == "prompt" and record["attempts"] == 3
    assert "refused structured output mode json_schema" in record["asks"][0]["error"]


def test_auto_keeps_the_first_mode_that_works(fake: FakeOpenAI, make_llm: MakeLLM) -> None:
    fake.script(refuse_response_format())
    proposer = make_llm()
    proposer.propose([], 1)
    proposer.propose([], 1)
    assert ["guided_json" in r.body for r in fake.chat_requests()] == [False, True, True]
    assert proposer.mode == "guided_json"


def test_auto_takes_json_object_when_llama_cpp_python_refuses_json_schema(
        fake: FakeOpenAI, make_llm: MakeLLM) -> None:
    """llama-cpp-python refuses an unknown response_format type with a 500 that lists the
    types it admits; its json_object with a schema is the form it constrains (it ignores
    guided_json silently, see tests/test_llm_server.py), so auto goes there next."""
    fake.script(error(500, "1 validation error: {'type': 'literal_error', 'loc': ('body', "
                           "'response_format', 'type'), 'msg': \"Input should be 'text' or "
                           "'json_object'\", 'input': 'json_schema'}"))
    proposer = make_llm()
    proposer.propose([], 1)
    formats = [r.body.get("response_format", {}).get("type")
               for r in fake.chat_requests()]
    assert formats == ["json_schema", "json_object"]
    assert proposer.mode == "json_object"


def test_an_explicit_mode_the_server_refuses_is_unavailable(fake: FakeOpenAI,
                                                            make_llm: MakeLLM) -> None:
    fake.script(refuse_guided_json())
    with pytest.raises(LLMUnavailable, match=r"refused structured output mode guided_json.*'auto'"):
        make_llm(structured_output="guided_json").propose([], 1)


def test_a_400_about_something_else_is_no_reason_to_change_mode(fake: FakeOpenAI,
                                                                make_llm: MakeLLM) -> None:
    fake.script(error(400, "maximum context length is 4096 tokens"))
    with pytest.raises(LLMUnavailable, match="maximum context length"):
        make_llm().propose([], 1)
    assert len(fake.chat_requests()) == 1



# --- the API key --------------------------------------------------------------------------------


@pytest.fixture
def key_in_env(monkeypatch: pytest.MonkeyPatch, fake: FakeOpenAI) -> str:
    monkeypatch.setenv("RECIPELAB_LLM_API_KEY", TEST_API_KEY)
    monkeypatch.setenv("RECIPELAB_LLM_BASE_URL", fake.base_url)
    monkeypatch.delenv("RECIPELAB_LLM_MODEL", raising=False)
    return TEST_API_KEY


def test_the_api_key_goes_only_into_the_authorization_header(fake: FakeOpenAI,
                                                             key_in_env: str) -> None:
    config = LLMConfig.from_env(readiness_poll_s=0.02, backoff_base_s=0.01)
    fake.script(text("nonsense"), error(500), good())
    proposer = LLMProposer(config, BASELINE, BASELINE_ID, SPACE, TARGET)
    [proposal] = proposer.propose(synthetic_history(BASELINE, 24), 1)
    proposer.close()
    assert fake.received
    for request in fake.received:
        assert request.headers["authorization"] == f"Bearer {key_in_env}"
        others = {k: v for k, v in request.headers.items() if k != "authorization"}
        assert key_in_env not in request.raw + request.path + json.dumps(others)
    assert key_in_env not in json.dumps(proposal.artifacts) + repr(proposal)


def test_the_config_never_shows_the_key(key_in_env: str) -> None:
    config = LLMConfig.from_env()
    assert config.api_key.get_secret_value() == key_in_env
    for shown in (repr(config), str(config), config.model_dump_json(), repr(config.model_dump())):
        assert key_in_env not in shown


def test_a_key_the_server_echoes_back_is_scrubbed_from_errors(fake: FakeOpenAI,
                                                               key_in_env: str) -> None:
    fake.script(error(401, "invalid credentials {authorization}"))
    proposer = LLMProposer(LLMConfig.from_env(), BASELINE, BASELINE_ID, SPACE, TARGET)
    with pytest.raises(LLMUnavailable, match=r"HTTP 401: .*Bearer \[redacted\]") as caught:
        proposer.propose([], 1)
    proposer.close()
    assert key_in_env not in str(caught.value) + repr(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_key_the_server_echoes_back_is_scrubbed_from_proposals(fake: FakeOpenAI,
                                                                  key_in_env: str) -> None:
    fake.script(good(hypothesis="I was told {authorization}"))
    proposer = LLMProposer(LLMConfig.from_env(), BASELINE, BASELINE_ID, SPACE, TARGET)
    [proposal] = proposer.propose([], 1)
    proposer.close()
    assert proposal.hypothesis == "I was told Bearer [redacted]"
    assert key_in_env not in json.dumps(proposal.artifacts)


def test_from_env_reads_the_recipelab_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECIPELAB_LLM_BASE_URL", "http://spark:8000/v1")
    monkeypatch.setenv("RECIPELAB_LLM_MODEL", "meta/llama-3.1-8b-instruct")
    monkeypatch.setenv("RECIPELAB_LLM_API_KEY", "nvapi-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-other")
    config = LLMConfig.from_env(structured_output="nvext")
    assert (config.base_url, config.model) == ("http://spark:8000/v1", "meta/llama-3.1-8b-instruct")
    assert config.api_key.get_secret_value() == "nvapi-secret"
    assert config.structured_output == "nvext"


def test_from_env_falls_back_to_openai_api_key_then_a_placeholder(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECIPELAB_LLM_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-other")
    assert LLMConfig.from_env(base_url="http://h/v1").api_key.get_secret_value() == "sk-other"
    monkeypatch.delenv("OPENAI_API_KEY")
    assert LLMConfig.from_env(base_url="http://h/v1").api_key.get_secret_value() == "not-needed"


def test_from_env_without_an_endpoint_says_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECIPELAB_LLM_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="set RECIPELAB_LLM_BASE_URL"):
        LLMConfig.from_env()


def test_the_config_rejects_unknown_keys_and_bad_urls() -> None:
    with pytest.raises(ValidationError, match="Extra inputs"):
        LLMConfig(base_url="http://h/v1", temprature=0.2)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="base_url"):
        LLMConfig(base_url="localhost:8000")



# --- credentials in the base URL ---------------------------------------------------------------

URL_PASSWORD = "s3cr3t-pa55word"  # noqa: S105 - a made-up password the tests hunt for


@pytest.mark.parametrize(("url", "shown"), [
    (f"http://user:{URL_PASSWORD}@spark:8000/v1", "http://user:[redacted]@spark:8000/v1"),
    ("https://tok-9f8e7d6c@spark/v1", "https://[redacted]@spark/v1"),
    ("http://localhost:8000/v1", "http://localhost:8000/v1"),
    (f"http://u:{URL_PASSWORD}@[::1]:8000/v1", "http://u:[redacted]@[::1]:8000/v1"),
])
def test_redact_url_hides_the_credentials_of_a_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def with_credentials(base_url: str, password: str = URL_PASSWORD) -> str:
    return base_url.replace("http://", f"http://user:{password}@")


def test_credentials_in_the_base_url_appear_in_no_error(fake: FakeOpenAI) -> None:
    fake.script(error(401, "who is user:" + URL_PASSWORD + "?"))
    config = fast_config(with_credentials(fake.base_url))
    proposer = LLMProposer(config, BASELINE, BASELINE_ID, SPACE, TARGET)
    with pytest.raises(LLMUnavailable, match=r"user:\[redacted\]@127.0.0.1") as caught:
        proposer.propose([], 1)
    proposer.close()
    assert URL_PASSWORD not in str(caught.value) + repr(caught.value)
    assert URL_PASSWORD not in repr(config) + str(config)


def test_credentials_in_an_unreachable_base_url_appear_in_no_error() -> None:
    url = with_credentials(unused_url(), "p%40ss-w0rd")  # percent-encoded: '@' inside
    proposer = LLMProposer(fast_config(url, readiness_timeout_s=0.1), BASELINE, BASELINE_ID,
                           SPACE, TARGET)
    with pytest.raises(LLMUnavailable, match="not ready") as caught:
        proposer.propose([], 1)
    proposer.close()
    assert "p%40ss-w0rd" not in str(caught.value) and "p@ss-w0rd" not in str(caught.value)


def test_credentials_the_server_echoes_as_basic_authorization_are_scrubbed(
        fake: FakeOpenAI) -> None:
    # The HTTP client sends a URL's credentials as Basic authorization: base64, not the text.
    fake.script(good(hypothesis="I was told {authorization}"))
    proposer = LLMProposer(fast_config(with_credentials(fake.base_url)), BASELINE, BASELINE_ID,
                           SPACE, TARGET)
    [proposal] = proposer.propose([], 1)
    proposer.close()
    sent = fake.chat_requests()[0].headers["authorization"]
    assert sent.startswith("Basic ")
    assert proposal.hypothesis == "I was told Basic [redacted]"
    assert sent.split()[1] not in json.dumps(proposal.artifacts)


def test_credentials_in_the_base_url_appear_in_no_proposal(fake: FakeOpenAI) -> None:
    fake.script(good(hypothesis=f"the proxy said {URL_PASSWORD}"))
    proposer = LLMProposer(fast_config(with_credentials(fake.base_url)), BASELINE, BASELINE_ID,
                           SPACE, TARGET)
    [proposal] = proposer.propose([], 1)
    proposer.close()
    assert proposal.hypothesis == "the proxy said [redacted]"
    assert URL_PASSWORD not in json.dumps(proposal.artifacts) + repr(proposal)
