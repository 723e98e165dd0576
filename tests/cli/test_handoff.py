"""The hand-off to the cloud run (:mod:`recipelab.cli.handoff`): ``export`` writes the recipe
and its companions and names each file, says the distance on standard output and every
warning on standard error; ``verify`` reads the export's prediction and exits 0 on track,
1 worse, 3 better than predicted; ``cost`` prices the campaign's target; and every bad input
is one line, exit 2, with nothing written.

Nothing here trains: the campaign is its settings and one stored baseline trial, and the
run ``verify`` checks is a metrics file written by hand along the prediction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from recipelab.agent.setup.settings import CampaignSettings
from recipelab.cli import app
from recipelab.recipe import Recipe
from tests.cli.campaigns import stored_baseline_campaign
from tests.cli.shell import error_lines

METRICS_HEADER = "step,tokens,bytes_seen,train_loss,val_loss,val_bpb\n"


def recipelab(*args: str) -> Result:
    """``recipelab ARGS`` in this process, on a console wide enough that no line wraps."""
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})


def one_trial_campaign(directory: Path) -> Path:
    """A campaign of one complete baseline trial and no ladder (``--promote 0``): no winner,
    but a trial to export by ``--trial``."""
    settings = CampaignSettings.model_validate({
        "name": "done", "preset": "tiny", "precision": "fp32", "window": {"iterations": 1},
        "ladder": {"promote": 0}})
    return stored_baseline_campaign(directory, settings)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return one_trial_campaign(tmp_path_factory.mktemp("campaign") / "done")


@pytest.fixture(scope="module")
def exported(campaign: Path) -> Path:
    """The baseline exported for one CPU, as a control arm: a prediction.json to verify."""
    out = campaign.parent / "export"
    result = recipelab("export", str(campaign), "--out", str(out), "--trial", "p0000",
                       "--device", "cpu", "--gpus", "1")
    assert result.exit_code == 0, result.output
    return out


def run_along_the_prediction(exported: Path, factor: float, path: Path) -> Path:
    """A metrics.csv whose val_bpb is ``factor`` times the predicted one at each planned
    evaluation, as 'recipelab pretrain' writes it."""
    planned: list[dict[str, Any]] = json.loads((exported / "prediction.json").read_text())["planned"]
    rows = [f"{p['step']},{p['tokens']},{p['bytes']},3.0,2.0,{p['val_bpb'] * factor}"
            for p in planned]
    path.write_text(METRICS_HEADER + "\n".join(rows) + "\n")
    return path


def test_export_writes_the_recipe_and_its_companions_and_names_each_file(
        campaign: Path, tmp_path: Path) -> None:
    out = tmp_path / "cloud"
    result = recipelab("export", str(campaign), "--out", str(out), "--trial", "p0000",
                       "--device", "cpu", "--gpus", "1")

    assert result.exit_code == 0, result.output
    named = [line.removeprefix("wrote ") for line in result.stdout.splitlines()
             if line.startswith("wrote ")]
    assert sorted(named) == sorted(str(path) for path in out.iterdir())
    assert {"recipe.json", "prediction.json", "manifest.json"} <= {Path(p).name for p in named}
    Recipe.model_validate_json((out / "recipe.json").read_text())  # for 'recipelab pretrain'


def test_export_says_the_distance_on_stdout_and_its_warnings_on_stderr(
        campaign: Path, tmp_path: Path) -> None:
    result = recipelab("export", str(campaign), "--out", str(tmp_path / "cloud"), "--trial",
                       "p0000", "--device", "cpu", "--gpus", "1")

    assert result.exit_code == 0, result.output
    distance = [line for line in result.stdout.splitlines() if line.startswith("Distance:")]
    assert distance and "× the proxy's non-embedding parameters" in distance[0]
    warnings = [line for line in result.stderr.splitlines() if line.startswith("Warning:")]
    assert warnings and "the predicted band" in warnings[0]
    assert "Warning:" not in result.stdout


def test_export_warns_when_its_curve_has_not_bent_toward_a_floor(tmp_path: Path) -> None:
    """A trial whose curve fits best with a floor below 0 val_bpb: the export holds the
    floor at 0, warns on stderr, and writes the reason into prediction.json."""
    settings = CampaignSettings.model_validate({
        "name": "unbent", "preset": "tiny", "precision": "fp32", "window": {"iterations": 1},
        "ladder": {"promote": 0}})
    per_step = settings.baseline().tokens_per_step
    curve = [{"step": step, "loss": 33.5 * (step * per_step) ** -0.137 - 3.83}
             for step in range(10, 210, 10)]
    campaign = stored_baseline_campaign(tmp_path / "unbent", settings, curve)
    out = tmp_path / "cloud"
    result = recipelab("export", str(campaign), "--out", str(out), "--trial", "p0000",
                       "--device", "cpu", "--gpus", "1")

    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if "not physical" in line]
    assert warned and "floor below 0" in warned[0]
    written = json.loads((out / "prediction.json").read_text())
    assert written["fit"]["bounded"] and written["fit"]["c"] == 0.0
    assert min(p["low"] for p in written["planned"]) > 0


def test_a_recipe_that_does_not_fit_the_gpus_is_written_with_a_warning_naming_them(
        campaign: Path, tmp_path: Path) -> None:
    out = tmp_path / "cloud"
    result = recipelab("export", str(campaign), "--out", str(out), "--trial", "p0000",
                       "--gpus", "8", "--gpu-memory-gib", "0.0001")

    assert result.exit_code == 0, result.output
    assert "Warning: the recipe does not fit 8 GPU(s) of 0.0001 GiB: " in result.stderr
    [warning] = [line for line in result.stderr.splitlines() if "does not fit" in line]
    assert warning.endswith("recipe.json is written for another trainer.")
    assert (out / "recipe.json").exists()


def test_a_sharded_export_says_why_and_the_command_that_launches_it(
        campaign: Path, tmp_path: Path) -> None:
    result = recipelab("export", str(campaign), "--out", str(tmp_path / "cloud"), "--trial",
                       "p0000", "--sharding", "full", "--gpus", "2")

    assert result.exit_code == 0, result.output
    [line] = [line for line in result.stdout.splitlines() if line.startswith("sharded")]
    assert line.startswith("sharded (FSDP2): --sharding full; torchrun --standalone "
                           "--nproc-per-node 2 -m recipelab pretrain --recipe recipe.json")


def test_the_deprecated_lr_horizon_exponent_warns_and_changes_nothing(
        campaign: Path, exported: Path, tmp_path: Path) -> None:
    old = tmp_path / "old"
    result = recipelab("export", str(campaign), "--out", str(old), "--trial", "p0000",
                       "--device", "cpu", "--gpus", "1", "--lr-horizon-exponent", "0.5")

    assert result.exit_code == 0, result.output
    assert "warning: --lr-horizon-exponent is deprecated and ignored" in result.stderr
    assert (old / "recipe.json").read_text() == (exported / "recipe.json").read_text()


@pytest.mark.parametrize(("option", "says"), [
    (["--sharding", "bogus"], "sharding: Input should be 'auto', 'none' or 'full' (got 'bogus')"),
    (["--gpus", "0"], "gpus: Input should be greater than or equal to 1 (got 0)"),
], ids=["sharding", "gpus"])
def test_an_invalid_export_option_is_one_line_naming_it_and_nothing_is_written(
        campaign: Path, tmp_path: Path, option: list[str], says: str) -> None:
    out = tmp_path / "cloud"
    result = recipelab("export", str(campaign), "--out", str(out), "--trial", "p0000", *option)

    assert result.exit_code == 2
    assert error_lines(result.stderr) == [f"error: invalid export options: {says}"]
    assert not out.exists()


@pytest.mark.parametrize("command", ["export", "verify"])
def test_a_campaign_without_a_winner_says_why_and_how_to_choose_a_trial(
        campaign: Path, tmp_path: Path, command: str) -> None:
    option = (["--out", str(tmp_path / "cloud")] if command == "export"
              else ["--metrics", str(tmp_path / "metrics.csv")])
    result = recipelab(command, str(campaign), *option)

    assert result.exit_code == 2
    [line] = error_lines(result.stderr)
    assert "--promote is 0, so no finalist climbed the ladder that names a winner" in line
    assert "export a proxy trial with --trial pN" in line
    assert not (tmp_path / "cloud").exists()


@pytest.mark.parametrize("command", ["export", "cost"])
def test_an_unknown_target_is_one_line_naming_the_built_in_ones(
        campaign: Path, tmp_path: Path, command: str) -> None:
    where = ["--out", str(tmp_path / "cloud"), "--trial", "p0000"] if command == "export" else []
    result = recipelab(command, str(campaign), *where, "--target", "llama9")

    assert result.exit_code == 2
    [line] = error_lines(result.stderr)
    assert line.startswith("error: unknown target 'llama9'; choose one of llama2-7b, ")
    assert not (tmp_path / "cloud").exists()


@pytest.mark.parametrize(("factor", "code", "verdict"), [
    (1.001, 0, "verdict: on track"),
    (1.5, 1, "verdict: worse than predicted by 50.0%"),
    (0.5, 3, "verdict: better than predicted by 50.0%"),
], ids=["on-track", "worse", "better"])
def test_verify_exits_0_on_track_1_worse_and_3_better_than_predicted(
        exported: Path, tmp_path: Path, factor: float, code: int, verdict: str) -> None:
    """Better is its own status: the run is fine, the prediction (and the campaign's next
    one) is not."""
    metrics = run_along_the_prediction(exported, factor, tmp_path / "metrics.csv")
    result = recipelab("verify", str(exported), "--metrics", str(metrics))

    assert result.exit_code == code, result.output
    assert verdict in result.stdout


def test_verify_shows_each_evaluation_against_the_exports_prediction(
        exported: Path, tmp_path: Path) -> None:
    """The export directory's prediction.json is read (its campaign has no winner, so it
    has no prediction of its own), with the assumptions it rests on."""
    metrics = run_along_the_prediction(exported, 1.001, tmp_path / "metrics.csv")
    result = recipelab("verify", str(exported), "--metrics", str(metrics))

    assert result.exit_code == 0, result.output
    prediction = json.loads((exported / "prediction.json").read_text())
    rows = [line for line in result.stdout.splitlines() if "within the band" in line]
    assert len(rows) == len(prediction["planned"])
    for row, point in zip(rows, prediction["planned"], strict=True):
        assert f"{point['step']:,}" in row and f"{point['val_bpb']:.4f}" in row
    for assumption in prediction["assumptions"]:
        assert f"- {assumption}" in " ".join(result.stdout.split())


def test_a_prediction_file_that_is_not_one_is_named_with_the_fix(tmp_path: Path) -> None:
    written = tmp_path / "cloud" / "prediction.json"
    written.parent.mkdir()
    written.write_text('{"units": "val_bpb"}')
    result = recipelab("verify", str(written.parent), "--metrics", str(tmp_path / "m.csv"))

    assert result.exit_code == 2
    [line] = error_lines(result.stderr)
    assert line.startswith(f"error: {written} is not a prediction 'recipelab export' wrote (")
    assert line.endswith("); export again")


def test_a_metrics_file_without_an_evaluation_is_one_line_saying_to_wait(
        exported: Path, tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.csv"
    metrics.write_text(METRICS_HEADER + "10,5120,5120,3.0,,\n")
    result = recipelab("verify", str(exported), "--metrics", str(metrics))

    assert result.exit_code == 2
    assert error_lines(result.stderr) == [
        f"error: {metrics} has no evaluation yet (no val_bpb value): wait for the first "
        "--eval-every step"]


def test_cost_prices_the_campaigns_target_unless_another_is_given(campaign: Path) -> None:
    def priced(*args: str) -> dict[str, Any]:
        result = recipelab("cost", *args)
        assert result.exit_code == 0, result.output
        cloud_run: dict[str, Any] = json.loads(result.stdout)["cloud_run"]
        return cloud_run

    assert priced(str(campaign))["what"] == "toy at 20 tokens per parameter"
    assert priced(str(campaign), "--target", "llama3-70b")["what"] == (
        "llama3-70b at 20 tokens per parameter")
    assert priced()["what"] == "llama2-7b at 20 tokens per parameter"  # no campaign
