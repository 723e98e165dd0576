"""What a real OpenAI-compatible server does with the requests the LLM proposer sends.

The server is llama-cpp-python's (``python -m llama_cpp.server``) serving SmolLM2-135M-Instruct
on the CPU (see ``tests/llm_server.py``). Findings pinned here, for llama-cpp-python 0.3.x:

- Plain chat completions work; the GGUF's own ChatML template is used.
- ``response_format={"type": "json_schema", "json_schema": {...}}`` (the OpenAI, vLLM and NIM
  form) is **rejected**: the request model only admits ``"text"`` and ``"json_object"``, and
  the server answers with an error status (HTTP 500 carrying a pydantic ``literal_error``)
  instead of generating anything.
- ``response_format={"type": "json_object", "schema": {...}}`` (the Anyscale form) is the one
  that constrains output: the schema is compiled to a GBNF grammar, so keys, required keys,
  ``additionalProperties: false``, value types and string ``maxLength`` are enforced. Numeric
  ``minimum``/``maximum`` are **not** enforced (the grammar converter has a TODO for them), and
  the grammar's string rule admits raw control characters, so a reply must still be validated
  (and parsed with ``json.loads(..., strict=False)`` to be lenient about raw newlines).
- ``extra_body={"guided_json": schema}`` (vLLM's extension) is **silently ignored**: the request
  succeeds and the reply is byte-identical to the same request without it.

Requests go out at temperature 0 with a fixed seed: SmolLM2 replies are then deterministic.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from recipelab.proposer import default_space
from recipelab.proposer.llm import LLMProposer
from recipelab.proposer.llm_endpoint import LLMConfig, LLMUnavailable
from recipelab.recipe import BASELINE_PROPOSER
from recipelab.targets import proxy_recipe
from tests import llm_server
from tests.llm_server import LlmServer

smollm_server = llm_server.smollm_server  # the session fixture, used by name below

LR_MIN, LR_MAX = 1e-4, 1e-1
HYPOTHESIS_MAX_LENGTH = 80
EDIT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "lr": {"type": "number", "minimum": LR_MIN, "maximum": LR_MAX},
        "hypothesis": {"type": "string", "maxLength": HYPOTHESIS_MAX_LENGTH},
    },
    "required": ["lr", "hypothesis"],
    "additionalProperties": False,
}
PROPOSE_EDIT = ("Propose a learning rate for AdamW on a small GPT, as JSON with keys lr and "
                "hypothesis.")
OFF_TOPIC = "What is the capital of France?"


@pytest.fixture(scope="module")
def client(smollm_server: LlmServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=smollm_server.base_url, api_key=smollm_server.api_key,
                         timeout=60.0, max_retries=0)


def chat(client: openai.OpenAI, model: str, prompt: str, **kwargs: Any) -> ChatCompletion:
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": prompt}]
    completion: ChatCompletion = client.chat.completions.create(
        model=model, messages=messages, max_tokens=128, temperature=0.0, seed=0, **kwargs)
    return completion


def content_of(completion: ChatCompletion) -> str:
    content = completion.choices[0].message.content
    assert isinstance(content, str)
    return content


def structure_violations(value: object) -> list[str]:
    """What in ``value`` breaks EDIT_SCHEMA's structure: keys, types, string length."""
    if not isinstance(value, dict):
        return [f"not an object: {value!r}"]
    problems = []
    if set(value) != {"lr", "hypothesis"}:
        problems.append(f"keys {sorted(value)} instead of ['hypothesis', 'lr']")
    lr, hypothesis = value.get("lr"), value.get("hypothesis")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)):
        problems.append(f"lr is not a number: {lr!r}")
    if not isinstance(hypothesis, str):
        problems.append(f"hypothesis is not a string: {hypothesis!r}")
    elif len(hypothesis) > HYPOTHESIS_MAX_LENGTH:
        problems.append(f"hypothesis longer than {HYPOTHESIS_MAX_LENGTH} characters")
    return problems


def schema_violations(value: object) -> list[str]:
    """Everything in ``value`` that EDIT_SCHEMA forbids, numeric bounds included."""
    problems = structure_violations(value)
    if not problems:
        assert isinstance(value, dict)
        if not LR_MIN <= value["lr"] <= LR_MAX:
            problems.append(f"lr {value['lr']} outside [{LR_MIN}, {LR_MAX}]")
    return problems


def test_models_lists_the_served_model(smollm_server: LlmServer, client: openai.OpenAI) -> None:
    assert [model.id for model in client.models.list().data] == [smollm_server.model]


def test_chat_completion_returns_a_non_empty_reply(smollm_server: LlmServer,
                                                   client: openai.OpenAI) -> None:
    completion = chat(client, smollm_server.model, OFF_TOPIC)

    assert content_of(completion).strip()
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage is not None
    assert 0 < completion.usage.completion_tokens <= 128


def test_json_schema_response_format_is_rejected(smollm_server: LlmServer,
                                                 client: openai.OpenAI) -> None:
    """The OpenAI/vLLM/NIM ``json_schema`` form is refused outright, with an error status."""
    with pytest.raises(openai.APIStatusError) as raised:
        chat(client, smollm_server.model, PROPOSE_EDIT, response_format={
            "type": "json_schema",
            "json_schema": {"name": "edit", "schema": EDIT_SCHEMA, "strict": True}})

    assert raised.value.status_code >= 400
    assert "json_object" in str(raised.value)  # the error names the types it does accept


def test_json_object_with_schema_yields_json_of_the_schema_shape(smollm_server: LlmServer,
                                                                 client: openai.OpenAI) -> None:
    """``{"type": "json_object", "schema": ...}`` is the form that constrains the reply.

    It goes in ``extra_body`` because the openai client's types know no ``schema`` key there.
    """
    for prompt in (PROPOSE_EDIT, OFF_TOPIC):  # even a prompt that asks for no JSON gets JSON
        completion = chat(client, smollm_server.model, prompt,
                          extra_body={"response_format": {"type": "json_object", "schema": EDIT_SCHEMA}})

        assert completion.choices[0].finish_reason == "stop"
        reply = json.loads(content_of(completion))
        assert structure_violations(reply) == [], content_of(completion)


def test_json_object_schema_does_not_enforce_numeric_bounds(smollm_server: LlmServer,
                                                            client: openai.OpenAI) -> None:
    """``minimum``/``maximum`` are not compiled into the grammar: the proposer must check them."""
    completion = chat(client, smollm_server.model, "Set lr to 0.5 and explain why in one sentence.",
                      extra_body={"response_format": {"type": "json_object", "schema": EDIT_SCHEMA}})

    reply = json.loads(content_of(completion))
    assert structure_violations(reply) == []
    assert schema_violations(reply) == [f"lr {reply['lr']} outside [{LR_MIN}, {LR_MAX}]"]


def test_guided_json_is_silently_ignored(smollm_server: LlmServer, client: openai.OpenAI) -> None:
    """vLLM's ``guided_json`` extension is accepted and ignored: the reply is what it would be
    without it, and (for a prompt that asks for no JSON) not JSON of the schema's shape."""
    guided = chat(client, smollm_server.model, OFF_TOPIC, extra_body={"guided_json": EDIT_SCHEMA})
    unguided = chat(client, smollm_server.model, OFF_TOPIC)

    assert content_of(guided) == content_of(unguided)
    try:
        reply: object = json.loads(content_of(guided))
    except json.JSONDecodeError:
        return
    assert schema_violations(reply) != []


def test_the_proposer_in_auto_mode_settles_on_json_object(smollm_server: LlmServer) -> None:
    """``structured_output='auto'`` reads the server's refusal of ``json_schema`` and moves
    to the one form it constrains; through ``guided_json`` (ignored) it got free text."""
    baseline = proxy_recipe("tiny")
    proposer = LLMProposer(LLMConfig(base_url=smollm_server.base_url, temperature=0.0,
                                     max_attempts=1),
                           baseline, BASELINE_PROPOSER, default_space(baseline), "a small GPT")
    try:
        with contextlib.suppress(LLMUnavailable):  # a 135M model may still break the bounds
            proposer.propose([], 1)
        assert proposer.mode == "json_object"
    finally:
        proposer.close()
