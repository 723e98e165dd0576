"""What every command shares (:mod:`recipelab.cli.common`): an error is one line and its
fix, exit status 2, never a traceback; a campaign is named or given by its folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from recipelab.cli import common
from recipelab.errors import RecipelabError


def test_a_failure_is_one_line_and_its_fix_with_exit_status_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as stopped:
        common.fail("no campaign at campaigns/x", "start one with 'recipelab run'")
    assert stopped.value.exit_code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: no campaign at campaigns/x", "fix: start one with 'recipelab run'"]


def test_an_error_no_command_caught_is_printed_as_one_not_as_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def broken() -> None:
        raise RecipelabError("the store is read-only", fix="run it where you can write")

    monkeypatch.setattr(common, "app", broken)
    with pytest.raises(SystemExit) as stopped:
        common.main()
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: the store is read-only", "fix: run it where you can write"]


def test_a_campaign_is_a_folder_when_one_is_given_else_a_name_under_campaigns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert common.campaign_dir("night") == Path("campaigns/night")
    assert common.campaign_dir("elsewhere/night") == Path("elsewhere/night")
    (tmp_path / "here").mkdir()
    assert common.campaign_dir("here") == Path("here")


def test_a_recipe_file_that_is_not_a_recipe_names_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "recipe.json"
    bad.write_text('{"optimizer": {"lr": "hot"}}')
    with pytest.raises(typer.Exit):
        common.load_recipe(bad)
    said = capsys.readouterr().err
    assert f"recipe file {bad} is invalid" in said and "optimizer.lr" in said
    assert len(said.strip().splitlines()) == 1, "one line"
    with pytest.raises(typer.Exit):
        common.load_recipe(tmp_path / "missing.json")
    assert "cannot read recipe file" in capsys.readouterr().err
