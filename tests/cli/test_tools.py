"""``train`` and ``space`` as a user meets them: readable output, clear errors, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recipelab.cli import app

runner = CliRunner()


def test_train_prints_val_bpb_throughput_and_peak_memory(tmp_path: Path) -> None:
    result = runner.invoke(app, ["train", "--preset", "tiny", "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    for label in ("val_bpb", "tokens/s", "peak memory", "wall time"):
        assert label in result.output
    assert (tmp_path / "t" / "result.json").exists()


def test_train_with_a_target_too_large_for_the_budget_names_the_smallest_budget() -> None:
    result = runner.invoke(app, ["train", "--preset", "tiny", "--target", "llama3-70b"])
    assert result.exit_code == 2
    assert "27,268,096" in result.output and "--budget" in result.output


def test_train_with_an_invalid_recipe_file_names_the_bad_knob(tmp_path: Path) -> None:
    bad = tmp_path / "recipe.json"
    bad.write_text('{"shape": {"n_layer": 2}, "optimizr": {}}')
    result = runner.invoke(app, ["train", "--recipe", str(bad)])
    assert result.exit_code == 2
    assert "optimizr" in result.output and "d_model" in result.output


def test_train_with_a_missing_corpus_is_refused_before_any_trial(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-corpus.txt"
    result = runner.invoke(app, ["train", "--preset", "tiny", "--corpus", str(missing),
                                 "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert "does not exist" in result.output and "python-docs" in result.output
    assert not (tmp_path / "run").exists()


def test_space_lists_at_least_sixteen_knobs_with_ranges_and_defaults() -> None:
    result = runner.invoke(app, ["space", "--preset", "cpu"])
    assert result.exit_code == 0, result.output
    assert "search space of the cpu proxy of smollm2-135m" in result.output
    listed = json.loads(runner.invoke(app, ["space", "--preset", "cpu", "--json"]).output)
    assert len(listed["knobs"]) >= 16
    names = [row["name"] for row in listed["knobs"]]
    for name in names:
        assert name in result.output
    lr = next(row for row in listed["knobs"] if row["name"] == "optimizer.lr")
    assert (lr["default"], lr["log"]) == (3e-3, True)
    assert (lr["low"], lr["high"]) == pytest.approx((3e-4, 3e-2))


def test_space_adds_the_searchable_shape_knobs_written_after_one_flag() -> None:
    result = runner.invoke(app, ["space", "--preset", "tiny", "--json", "--searchable",
                                 "shape.activation", "shape.norm", "shape.qk_norm"])
    assert result.exit_code == 0, result.output
    names = {row["name"] for row in json.loads(result.output)["knobs"]}
    assert {"shape.activation", "shape.norm", "shape.qk_norm"} <= names


def test_space_refuses_a_shape_knob_that_cannot_be_searched() -> None:
    result = runner.invoke(app, ["space", "--searchable", "shape.n_layer"])
    assert result.exit_code == 2
    assert "cannot search shape.n_layer; searchable shape knobs are" in result.output


def test_space_reads_a_target_file(tmp_path: Path) -> None:
    config = tmp_path / "my-llama" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": 16, "hidden_size": 2048,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192,
        "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "vocab_size": 128256, "tie_word_embeddings": True, "max_position_embeddings": 8192}))
    result = runner.invoke(app, ["space", "--preset", "cpu", "--target", str(config),
                                 "--budget", "5000000", "--json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    assert listed["target"] == "my-llama"
    rope = next(row for row in listed["knobs"] if row["name"] == "shape.rope_base")
    assert rope["default"] == 500000.0
