"""Bad input is named with its fix on one line, before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipelab.agent.setup.input_check import InputError, check_input, llm_url_problem
from recipelab.agent.setup.settings_components import until_problem


@pytest.mark.parametrize(("options", "words"), [
    ({"preset": "foo"}, ("--preset", "tiny, cpu, spark")),
    ({"target": "foo"}, ("--target", "choose one of")),
    ({"until": "25:00"}, ("--until", "HH:MM")),
    ({"until": "7pm"}, ("--until", "HH:MM")),
    ({"llm_base_url": "localhost:8000"}, ("--llm-base-url", "http://localhost:8000/v1")),
    ({"llm_base_url": "http//x"}, ("--llm-base-url", "http://localhost:8000/v1")),
])
def test_bad_input_is_named_with_its_fix_on_one_line(options: dict[str, str],
                                                     words: tuple[str, ...]) -> None:
    given = {"preset": None, "target": None, "until": None, "llm_base_url": None, **options}
    with pytest.raises(InputError) as caught:
        check_input(**given)
    message = str(caught.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_good_input_passes() -> None:
    check_input(preset="tiny", target="toy", until="07:30", llm_base_url="http://127.0.0.1:8000/v1")
    assert until_problem("0:05") is None and until_problem("23:59") is None
    assert llm_url_problem("https://nim.lan/v1", "--llm-base-url") is None


def test_a_malformed_llm_url_in_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECIPELAB_LLM_BASE_URL", "localhost:8000")
    with pytest.raises(InputError, match="RECIPELAB_LLM_BASE_URL"):
        check_input(preset=None, target=None, until=None, llm_base_url=None)


def test_a_target_file_is_valid_input_and_a_missing_one_says_so(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8,
        "num_key_value_heads": 4, "intermediate_size": 688, "vocab_size": 256,
        "hidden_act": "silu", "tie_word_embeddings": True, "max_position_embeddings": 1024}))
    check_input(preset="tiny", target=str(config), until=None, llm_base_url=None)
    with pytest.raises(InputError, match=r"target file .* does not exist"):
        check_input(preset="tiny", target=str(tmp_path / "nothing.json"), until=None,
                    llm_base_url=None)
