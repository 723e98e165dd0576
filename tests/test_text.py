"""An edit is rendered once for people and once for the LLM, by the same two functions
everywhere (status, report, prompt, calibration)."""

from __future__ import annotations

from recipelab.text import clip, edit_json, edit_text

EDIT = {"optimizer.lr": 0.003, "batch_size": 16, "shape.activation": "gelu"}


def test_people_read_knob_equals_value_with_full_or_short_names() -> None:
    assert edit_text(EDIT) == "optimizer.lr=0.003, batch_size=16, shape.activation=gelu"
    assert edit_text(EDIT, short_names=True) == "lr=0.003, batch_size=16, activation=gelu"
    assert edit_text({}) == "(baseline)"


def test_the_llm_reads_compact_json_clipped_to_its_budget() -> None:
    assert edit_json(EDIT, 200) == '{"optimizer.lr": 0.003, "batch_size": 16, "shape.activation": "gelu"}'
    assert edit_json(EDIT, 20) == clip(edit_json(EDIT, 200), 20) and len(edit_json(EDIT, 20)) == 20
    assert edit_json({}, 200) == "(the baseline)"
