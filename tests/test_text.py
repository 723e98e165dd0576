"""An edit is rendered once for people and once for the LLM, by the same two functions
everywhere (status, report, prompt, calibration)."""

from __future__ import annotations

from recipelab.text import clip, compact_edit, edit_json, edit_text

EDIT = {"optimizer.lr": 0.003, "batch_size": 16, "shape.activation": "gelu"}


def test_people_read_knob_equals_value_with_full_or_short_names() -> None:
    assert edit_text(EDIT) == "optimizer.lr=0.003, batch_size=16, shape.activation=gelu"
    assert edit_text(EDIT, short_names=True) == "lr=0.003, batch_size=16, activation=gelu"
    assert edit_text({}) == "(baseline)"


def test_the_llm_reads_compact_json_clipped_to_its_budget() -> None:
    assert edit_json(EDIT, 200) == '{"optimizer.lr": 0.003, "batch_size": 16, "shape.activation": "gelu"}'
    assert edit_json(EDIT, 20) == clip(edit_json(EDIT, 200), 20) and len(edit_json(EDIT, 20)) == 20
    assert edit_json({}, 200) == "(the baseline)"


def test_a_compact_edit_shows_the_rate_schedule_and_batch_first_then_how_many_more() -> None:
    parent = {"optimizer.lr": 0.01, "optimizer.eps": 1e-8, "batch_size": 16,
              "optimizer.beta2": 0.95, "precision": "fp32", "seq_len": 128}
    edit = {"optimizer.lr": 0.011, "optimizer.eps": 1e-10, "batch_size": 64,
            "optimizer.beta2": 0.99, "precision": "bf16", "seq_len": 64}
    # the rate, the batch and the context first, however little they moved
    assert compact_edit(edit, parent) == "lr=0.011, batch_size=64, seq_len=64 +3 more"
    # then the largest relative changes: a new precision 100%, eps 1e-8→1e-10 -99%, ...
    others = {k: v for k, v in edit.items() if k not in ("optimizer.lr", "batch_size", "seq_len")}
    assert compact_edit(others, parent) == "precision=bf16, eps=1e-10, beta2=0.99"
    assert compact_edit({}, parent) == "(baseline)"
    assert compact_edit({"optimizer.lr": 0.02}, parent) == "lr=0.02"
