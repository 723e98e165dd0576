"""Starting a campaign (:mod:`recipelab.cli.campaign_start`): the settings resolved from the
saved ones and the options given, what was decided said one line each, a campaign another
process runs refused before its preflight, paths given on the command line saved absolute,
and the night's summary and verdict printed at its end.

Nothing here trains: a campaign "finished" by hand (its settings and one stored baseline
trial, with nothing left to do) is what ``run`` resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recipelab.agent.campaign_lock import CampaignLock
from recipelab.agent.setup.settings import CampaignSettings, ExecutorSettings, WindowSettings, save
from recipelab.cli import app
from recipelab.cli.campaign_start import given_corpus, resolve_settings
from recipelab.targets import get_target
from tests.cli.campaigns import stored_baseline_campaign
from tests.cli.shell import error_lines

runner = CliRunner()


def finished_campaign(directory: Path, **settings: object) -> Path:
    """A one-trial campaign with nothing left to do: its baseline stored as complete, no
    ladder, attribution or width rung; a ``run`` of it resumes, trains nothing, and prints
    its end."""
    chosen = CampaignSettings.model_validate({
        "name": "done", "preset": "tiny", "precision": "fp32", "window": {"iterations": 1},
        "ladder": {"promote": 0, "attribution": False, "width_rung": False},
        "search": {"noise_seeds": 1}, "executor": {"parallel": 1}, **settings})
    return stored_baseline_campaign(directory, chosen)


def stored_trials(campaign: Path) -> list[str]:
    return (campaign / "trajectory.jsonl").read_text().splitlines()


def test_a_corpus_path_is_made_absolute_and_a_built_in_name_stays_a_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A resume from another directory must read the same files."""
    monkeypatch.chdir(tmp_path)
    assert given_corpus("notes/text.txt", None) == {"source": str(tmp_path / "notes/text.txt")}
    assert given_corpus("python-docs", 4096) == {"source": "python-docs", "max_bytes": 4096}
    assert given_corpus(None, 4096) == {"max_bytes": 4096}


def test_a_corpus_not_given_leaves_the_saved_one_alone() -> None:
    assert given_corpus(None, None) is None


def test_a_resume_keeps_the_saved_name_and_takes_the_options_given(tmp_path: Path) -> None:
    """``--dir`` resumes whatever campaign is there: the name option (default ``default``)
    must not rename it, while an option given changes its field."""
    save(CampaignSettings(name="overnight", precision="fp32", executor=ExecutorSettings(parallel=1),
                          window=WindowSettings(iterations=3)), tmp_path)
    given = {"ladder": {"promote": 0}, "window": {"iterations": 5}}
    resolved, new = resolve_settings(tmp_path, "default", given)
    settings = resolved.settings
    assert not new and settings.name == "overnight"
    assert (settings.ladder.promote, settings.window.iterations) == (0, 5)


def test_what_was_decided_is_said_on_stderr_for_run_and_on_the_console_for_check(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``run`` keeps its standard output for the night's results; ``check`` is all report."""
    resolved, new = resolve_settings(tmp_path / "night", "night",
                                     {"preset": "tiny", "window": {"iterations": 2}})
    said = capsys.readouterr()
    assert new and resolved.settings.name == "night"
    assert "parallel auto:" in said.err and "parallel auto:" not in said.out

    resolve_settings(tmp_path / "night", "night", {"preset": "tiny"}, check_only=True)
    said = capsys.readouterr()
    assert "no budget given: checking a campaign of --window.iterations 20" in said.out
    assert "parallel auto:" in said.out and said.err == ""


def test_a_resume_that_would_change_what_the_numbers_mean_is_one_line_with_exit_2(
        tmp_path: Path) -> None:
    campaign = finished_campaign(tmp_path / "c")
    result = runner.invoke(app, ["run", "--dir", str(campaign), "--preset", "cpu",
                                 "--skip-preflight"], terminal_width=400)

    assert result.exit_code == 2, result.output
    assert error_lines(result.stderr) == [result.stderr.strip()]
    assert "was started with different preset (preset: saved 'tiny', asked 'cpu')" in result.stderr
    assert "run again with the saved values, or start a new campaign with another --name" in (
        result.stderr)
    assert len(stored_trials(campaign)) == 1


def test_an_unknown_log_format_is_refused_first_naming_the_choices(tmp_path: Path) -> None:
    """Before any setting is resolved (here the missing budget would be the next error), and
    before anything is written."""
    campaign = tmp_path / "c"
    result = runner.invoke(app, ["run", "--dir", str(campaign), "--log-format", "xml"],
                           terminal_width=400)

    assert result.exit_code == 2
    assert error_lines(result.stderr) == [
        "error: --log-format 'xml' is not one of lines, events, json"]
    assert not campaign.exists()


def test_a_campaign_another_process_runs_is_refused_before_its_preflight(tmp_path: Path) -> None:
    """The preflight's trial would compete with the running campaign for the device."""
    campaign = finished_campaign(tmp_path / "c")
    with CampaignLock(campaign):
        result = runner.invoke(app, ["run", "--dir", str(campaign)], terminal_width=400)

    assert result.exit_code == 2, result.output
    assert "is already being run by pid" in result.stderr
    assert "stop that process first (Ctrl-C or kill), or watch it with 'recipelab status'" in (
        result.stderr)
    assert "preflight" not in result.output


def test_a_target_file_given_by_a_relative_path_is_the_file_the_campaign_saved(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The target's path is saved absolute (the campaign reads it again, perhaps from another
    directory), so the same command typed again resumes rather than 'changes the target'."""
    toy = get_target("toy")
    target = tmp_path / "mine.json"
    target.write_text(json.dumps({"name": "mine", "context": toy.context,
                                  "shape": toy.shape.model_dump(mode="json")}))
    campaign = finished_campaign(tmp_path / "c", target=str(target))
    monkeypatch.chdir(tmp_path)

    result = runner.invoke(app, ["run", "--dir", "c", "--target", "mine.json",
                                 "--skip-preflight"], terminal_width=400)

    assert result.exit_code == 0, result.output
    assert json.loads((campaign / "settings.json").read_text())["target"] == str(target)


def test_a_finished_campaign_run_again_prints_its_summary_then_its_verdict(tmp_path: Path) -> None:
    campaign = finished_campaign(tmp_path / "c")
    result = runner.invoke(app, ["run", "--dir", str(campaign), "--skip-preflight"],
                           terminal_width=400)

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == ("campaign done: 1 proxy trials, 0 rejected, 0 rung runs, "
                        "0 top-rung runs; best proxy p0000 val_bpb 2.5000")
    assert lines[1].startswith("no winner: --promote is 0, so no finalist climbed the ladder")
    assert len(stored_trials(campaign)) == 1, "nothing was left to train"


def test_a_campaign_directory_that_cannot_be_made_says_what_to_do(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    campaign = blocked / "c"
    result = runner.invoke(app, ["run", "--dir", str(campaign), "--preset", "tiny",
                                 "--iterations", "1", "--skip-preflight"], terminal_width=400)

    assert result.exit_code == 2, result.output
    [line] = error_lines(result.stderr)
    assert line.startswith(f"error: cannot use campaign directory {campaign}: ")
    assert line.endswith("Make it writable and run the same command again (it resumes), or "
                         "start over with another --dir.")
