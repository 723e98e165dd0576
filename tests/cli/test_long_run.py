"""The long run's commands (:mod:`recipelab.cli.long_run`): ``tokenize`` reads a corpus by
its absolute path and says what it wrote; ``pretrain`` trains the recipe file with the
``--set`` and ``--total-steps`` edits applied, under the campaign its export's manifest
names; ``gpu-check`` refuses what it cannot run before running anything; and every bad input
is one line, exit 2, with nothing written.

One test module trains: a two-step run of the tiny proxy on a small text file, shared by
the tests that read what it recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from recipelab.cli import app
from recipelab.cli.long_run import parse_knob_settings
from recipelab.targets import proxy_recipe
from tests.cli.shell import error_lines

TEXT = "def f(x):\n    return x + 1\n" * 4000  # 108,000 bytes: enough for train and val


def recipelab(*args: str, cache: Path | None = None) -> Result:
    """``recipelab ARGS`` in this process, with the corpus cache under ``cache`` when given."""
    env = {"COLUMNS": "400", **({"RECIPELAB_CACHE": str(cache)} if cache else {})}
    return CliRunner().invoke(app, list(args), env=env)


def exported_recipe(directory: Path, manifest: dict[str, Any] | None = None) -> Path:
    """A tiny-proxy recipe.json as 'recipelab export' leaves it, with its manifest beside it
    when given."""
    directory.mkdir(parents=True)
    recipe = directory / "recipe.json"
    recipe.write_text(proxy_recipe("tiny").apply({"eval_bytes": 4096}).model_dump_json())
    if manifest is not None:
        (directory / "manifest.json").write_text(json.dumps(manifest))
    return recipe


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    """``pretrain`` of an export of campaign 'nightly', at batch 4 for 2 steps: its result
    and its run directory."""
    root = tmp_path_factory.mktemp("pretrain")
    corpus = root / "text.txt"
    corpus.write_text(TEXT)
    recipe = exported_recipe(root / "export", {"campaign": "nightly"})
    out = root / "run"
    result = recipelab("pretrain", "--recipe", str(recipe), "--out", str(out), "--corpus",
                       str(corpus), "--set", "batch_size=4", "--total-steps", "2",
                       "--eval-every", "2", "--log-every", "1", "--checkpoint-every", "0",
                       "--device", "cpu", "--threads", "1", cache=root / "cache")
    return result, out


def events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def test_a_knob_setting_is_json_where_it_parses_and_a_string_otherwise() -> None:
    assert parse_knob_settings([
        "batch_size=8", "optimizer.lr=1e-3", "shape.qk_norm=true", "schedule.kind=wsd",
        'precision="bf16"', " seed =3", "tokenizer=a=b"]) == {
        "batch_size": 8, "optimizer.lr": 1e-3, "shape.qk_norm": True, "schedule.kind": "wsd",
        "precision": "bf16", "seed": 3, "tokenizer": "a=b"}


@pytest.mark.parametrize("setting", ["batch_size", "=8"])
def test_a_setting_without_its_knob_or_equals_sign_is_refused_with_an_example(
        tmp_path: Path, setting: str) -> None:
    recipe = exported_recipe(tmp_path / "export")
    result = recipelab("pretrain", "--recipe", str(recipe), "--out", str(tmp_path / "run"),
                       "--set", setting)

    assert result.exit_code == 2
    assert error_lines(result.stderr) == [
        "error: --set takes KNOB=VALUE (e.g. batch_size=8 or optimizer.lr=0.001), "
        f"got {setting!r}"]
    assert not (tmp_path / "run").exists()


def test_an_unknown_knob_is_refused_naming_the_knobs_there_are(tmp_path: Path) -> None:
    recipe = exported_recipe(tmp_path / "export")
    result = recipelab("pretrain", "--recipe", str(recipe), "--out", str(tmp_path / "run"),
                       "--set", "optimizer.lrr=0.1")

    assert result.exit_code == 2
    [line] = error_lines(result.stderr)
    assert line.startswith("error: unknown knob(s) optimizer.lrr; known knobs are ")
    assert "optimizer.lr," in line
    assert not (tmp_path / "run").exists()


def test_an_invalid_pretrain_setting_is_one_line_naming_it(tmp_path: Path) -> None:
    recipe = exported_recipe(tmp_path / "export")
    result = recipelab("pretrain", "--recipe", str(recipe), "--out", str(tmp_path / "run"),
                       "--keep-last", "0")

    assert result.exit_code == 2
    assert error_lines(result.stderr) == [
        "error: invalid pretrain settings: keep_last: Input should be greater than or equal "
        "to 1 (got 0)"]
    assert not (tmp_path / "run").exists()


def test_pretrain_says_how_the_run_ended_and_exits_with_its_code(
        two_steps: tuple[Result, Path]) -> None:
    result, out = two_steps
    assert result.exit_code == 0, result.output
    assert f"pretrain complete after 2 steps → {out}" in result.stdout


def test_the_set_and_total_steps_edits_are_the_recipe_trained(
        two_steps: tuple[Result, Path]) -> None:
    _, out = two_steps
    [start] = [e for e in events(out) if e["event"] == "pretrain_start"]
    assert (start["steps"], start["tokens_per_step"]) == (2, 4 * proxy_recipe("tiny").seq_len)


def test_the_run_is_logged_under_the_campaign_its_exports_manifest_names(
        two_steps: tuple[Result, Path]) -> None:
    _, out = two_steps
    assert {e["campaign"] for e in events(out)} == {"nightly"}


def test_tokenize_reads_a_corpus_by_its_absolute_path_and_says_what_it_wrote(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative path is made absolute, so the meta.json beside the tokens names the files
    wherever it is read from; ``--corpus-max-bytes`` caps what is read."""
    (tmp_path / "text.txt").write_text(TEXT)
    monkeypatch.chdir(tmp_path)
    result = recipelab("tokenize", "--out", "tokens", "--corpus", "text.txt", "--tokenizer",
                       "byte", "--val-fraction", "0.1", "--corpus-max-bytes", "50000")

    assert result.exit_code == 0, result.output
    meta = json.loads((tmp_path / "tokens" / "meta.json").read_text())
    assert meta["source"] == str(tmp_path / "text.txt")
    assert meta["train_tokens"] + meta["val_tokens"] == 50_000
    assert result.stdout.strip() == (
        f"wrote tokens: {meta['train_tokens']:,} train / {meta['val_tokens']:,} val tokens "
        f"(uint16, byte, vocabulary 256) from {tmp_path / 'text.txt'}")


@pytest.mark.parametrize(("option", "says"), [
    (["--device", "tpu"], "--device 'tpu' is not one of auto, cuda, cpu"),
    (["--corpus", "no-such-corpus"], "--corpus 'no-such-corpus' does not exist: give a text "
     "file, a directory of .txt/.md or Parquet files, or a built-in corpus (python-docs, "
     "python-source)"),
    (["--timeout", "0"], "--timeout must be a positive number of seconds, got 0.0"),
], ids=["device", "corpus", "timeout"])
def test_gpu_check_refuses_what_it_cannot_run_before_running_anything(
        tmp_path: Path, option: list[str], says: str) -> None:
    out = tmp_path / "check"
    result = recipelab("gpu-check", "--out", str(out), *option)

    assert result.exit_code == 2
    assert error_lines(result.stderr) == [f"error: {says}"]
    assert not out.exists()
