"""``run`` and ``check`` as a user meets them: bad input in one line with exit 2 and nothing
written, the preflight's refusals with their fixes, the help, and ``auto`` resolved once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from recipelab.cli import app
from tests.cli.shell import closed_port, error_lines, recipelab

runner = CliRunner()


def test_run_without_a_budget_asks_for_one(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--dir", str(tmp_path / "c"), "--preset", "tiny"])
    assert result.exit_code == 2
    assert "--window.iterations" in result.output


@pytest.mark.parametrize(("args", "env", "words"), [
    (["--preset", "foo"], {}, ("--preset 'foo'", "tiny, cpu, spark")),
    (["--target", "foo"], {}, ("--target 'foo'", "choose one of")),
    (["--until", "25:00"], {}, ("--until '25:00'", "HH:MM")),
    (["--llm-base-url", "http//x"], {}, ("--llm-base-url 'http//x'", "http://localhost:8000/v1")),
    ([], {"RECIPELAB_LLM_BASE_URL": "localhost:8000"},
     ("RECIPELAB_LLM_BASE_URL 'localhost:8000'", "http://localhost:8000/v1")),
    (["--mlflow-uri", "ftp://ann:pw@host/mlruns"], {},
     ("--mlflow-uri 'ftp://ann:[redacted]@host/mlruns'", "sqlite:///PATH/mlflow.db")),
    (["--db", "mysql://ann:pw@host/runs"], {},
     ("'mysql://ann:[redacted]@host/runs' is not supported", "postgresql+psycopg://")),
    (["--edit", "lr=0.1"], {}, ("--edit 'lr=0.1' is not JSON", '{"optimizer.lr": 0.005}')),
    (["--edit", '{"optimizer.lrr": 0.1}'], {}, ("'optimizer.lrr'", "did you mean optimizer.lr?")),
], ids=["preset", "target", "until", "url-option", "url-env", "mlflow-uri", "db-url",
        "edit-json", "edit-knob"])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing_behind(
        tmp_path: Path, args: list[str], env: dict[str, str], words: tuple[str, ...]) -> None:
    result = recipelab("run", "--name", "bad", "--iterations", "1", *args, cwd=tmp_path, env=env)

    assert result.returncode == 2, result.stderr
    lines = error_lines(result.stderr)
    assert len(lines) == 1 and result.stderr.strip() == lines[0], result.stderr
    for word in words:
        assert word in lines[0]
    assert list(tmp_path.iterdir()) == [], "nothing may be created for a typo"


def test_run_refuses_a_missing_corpus_before_any_trial_with_the_fix(tmp_path: Path) -> None:
    result = recipelab("run", "--name", "c", "--preset", "tiny", "--iterations", "1",
                       "--corpus", "no-such-corpus", cwd=tmp_path)

    assert result.returncode == 2, result.stderr
    assert "no-such-corpus does not exist" in result.stderr
    assert "use a built-in corpus" in result.stderr  # the fix
    assert "preflight found 1 error(s) (corpus)" in result.stderr
    assert not (tmp_path / "campaigns").exists()


def test_run_refuses_cuda_on_a_machine_without_it_with_the_fix(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    result = recipelab("run", "--name", "c", "--preset", "tiny", "--iterations", "1",
                       "--device", "cuda", cwd=tmp_path)

    assert result.returncode == 2, result.stderr
    assert "sees no CUDA GPU" in result.stderr
    assert "install the CUDA build of torch" in result.stderr and "--device cpu" in result.stderr
    assert not (tmp_path / "campaigns").exists()


def test_check_on_a_good_setup_exits_0_and_writes_no_campaign(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    result = recipelab("check", "--name", "c", "--preset", "tiny", "--iterations", "2",
                       "--stress-steps", "100", cwd=tmp_path, env={"RECIPELAB_CACHE": str(cache)})

    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("device", "disk", "memory", "guardrails", "corpus", "trial"):
        assert f"ok      {name}" in result.stdout, result.stdout
    assert "preflight passed" in result.stdout
    assert not (tmp_path / "campaigns").exists()
    assert list((cache / "datasets").glob("*/meta.json")), "the first trial finds the cache warm"


@pytest.mark.parametrize("preset", ["tiny", "cpu"])
def test_the_bare_check_of_every_cpu_preset_passes_its_own_preflight(
        tmp_path: Path, preset: str) -> None:
    """A default must pass its own preflight: the default corpus serves the default top rung
    once, and a check without a budget checks a short night."""
    result = recipelab("check", "--preset", preset, cwd=tmp_path,
                       env={"RECIPELAB_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no budget given: checking a campaign of --window.iterations 20" in result.stdout
    assert "ok      corpus      python-source" in result.stdout
    assert "preflight passed" in result.stdout


def test_a_preset_the_builtin_corpora_cannot_serve_names_the_corpus_size_it_needs(
        tmp_path: Path) -> None:
    result = recipelab("check", "--preset", "spark", "--iterations", "2", cwd=tmp_path,
                       env={"RECIPELAB_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 2
    assert "fix: use --corpus PATH with at least" in result.stdout, result.stdout


def test_an_llm_endpoint_that_is_down_is_a_warning_and_every_llm_turn_asks_it_again(
        tmp_path: Path) -> None:
    """The preflight's probe is no verdict on the night: the campaign keeps the hybrid, the
    sampler takes each turn the LLM cannot, and the night says how many were the LLM's."""
    cache = tmp_path / "cache"
    url = f"http://127.0.0.1:{closed_port()}/v1"
    result = recipelab("run", "--name", "c", "--preset", "tiny", "--iterations", "4",
                       "--promote", "0", "--noise-seeds", "1", "--llm-share", "0.5", cwd=tmp_path,
                       env={"RECIPELAB_CACHE": str(cache), "RECIPELAB_LLM_BASE_URL": url})

    assert result.returncode == 0, result.stderr
    assert "warning llm" in result.stderr and "the sampler proposes until the LLM answers" in result.stderr
    assert "classical-only" not in result.stderr
    campaign = tmp_path / "campaigns" / "c"
    events = [json.loads(line) for line in (campaign / "events.jsonl").read_text().splitlines()]
    assert {e["check"] for e in events if e["event"] == "preflight"} >= {"llm", "trial"}
    records = [json.loads(line) for line in (campaign / "trajectory.jsonl").read_text().splitlines()]
    assert len(records) == 4
    fallbacks = [e for e in events if e["event"] == "llm_fallback"]
    assert fallbacks, "the LLM was asked on its turn"
    assert len([e for e in events if e["event"] == "llm_down"]) == 1
    [finished] = [e for e in events if e["event"] == "campaign_finished"]
    assert finished["llm_trials"] == 0 and finished["search_trials"] == 3  # after the baseline
    status = recipelab("status", str(campaign), cwd=tmp_path, env={"RECIPELAB_LLM_BASE_URL": url})
    assert "the LLM proposed 0 of 3 search trials; the sampler took" in " ".join(
        status.stdout.split()), status.stdout
    assert json.loads((campaign / "settings.json").read_text())["proposer"]["kind"] is None


def test_your_edits_run_first_and_a_rejected_one_says_why_and_is_not_tried_again(
        tmp_path: Path) -> None:
    """``--edit``: after the baseline, the person's edits in order; the guardrails judge them
    as they judge the proposer's, and a resume with more iterations goes on past them."""
    env = {"RECIPELAB_CACHE": str(tmp_path / "cache")}
    options = ("run", "--name", "c", "--preset", "tiny", "--noise-seeds", "1", "--promote", "0",
               "--edit", '{"optimizer.lr": 0.005}',
               "--edit", '{"schedule.kind": "wsd", "schedule.warmup_steps": 18}')
    first = recipelab(*options, "--iterations", "3", cwd=tmp_path, env=env)

    assert first.returncode == 0, first.stderr
    assert "p0002 rejected (schedule=wsd, warmup_steps=18):\n      the wsd schedule decays" in first.stderr
    campaign = tmp_path / "campaigns" / "c"
    trials = final_records(campaign)
    assert [(r["proposer"], r["edit"], r["status"]) for r in trials[:3]] == [
        ("baseline", {}, "complete"),
        ("person", {"optimizer.lr": 0.005}, "complete"),
        ("person", {"schedule.kind": "wsd", "schedule.warmup_steps": 18}, "rejected")]
    assert "inside the 18-step warmup" in trials[2]["reasons"][0]
    assert [r["proposer"] for r in trials[3:]] == ["classical-tpe"]

    resumed = recipelab(*options, "--iterations", "4", cwd=tmp_path, env=env)

    assert resumed.returncode == 0, resumed.stderr
    assert [r["proposer"] for r in final_records(campaign)[3:]] == ["classical-tpe"] * 2


def final_records(campaign: Path) -> list[dict[str, Any]]:
    """Each trial's last record, in trial-id order."""
    last = {}
    for line in (campaign / "trajectory.jsonl").read_text().splitlines():
        record = json.loads(line)
        last[record["trial_id"]] = record
    return [last[trial_id] for trial_id in sorted(last)]


def test_run_help_shows_the_ray_extra_literally() -> None:
    result = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "300"})

    assert result.exit_code == 0
    assert "pip install 'recipelab[ray]'" in result.output


def test_run_help_names_the_ladder_and_its_successors_of_the_middle_rung() -> None:
    result = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "300"})

    assert result.exit_code == 0
    text = " ".join(result.output.replace("│", " ").split())
    for option in ("--ladder.eta", "--ladder.rung-size", "--ladder.rung-steps",
                   "--ladder.stress-steps", "--ladder.promote"):
        assert option in text
    assert "successive halving, ASHA-style" in text and "the baseline climbs every rung" in text
    assert "the published 0.32" in text and "--ladder.repeat-text" in text


def test_check_takes_the_options_of_run_with_their_help() -> None:
    result = runner.invoke(app, ["check", "--help"], env={"COLUMNS": "300"})

    assert result.exit_code == 0
    for text in ("--dir", "campaign directory", "--corpus.max-bytes", "--proposer.llm-base-url"):
        assert text in result.output
    assert "--skip-preflight" not in result.output


def test_one_run_resolves_auto_once_and_saves_what_ran(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command resolves ``auto`` once, before its preflight; the preflight, the campaign
    and settings.json read that one answer (they used to resolve it again, each their way)."""
    from recipelab.agent.setup import machine

    calls: list[str] = []

    def counted(where: str, function: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(where)
            return function(*args, **kwargs)
        return call

    monkeypatch.setattr(machine, "resolve_auto", counted("command", machine.resolve_auto))
    monkeypatch.setattr("recipelab.agent.campaign.resolve", counted("campaign", machine.resolve))
    campaign = tmp_path / "c"
    result = CliRunner().invoke(app, [
        "run", "--dir", str(campaign), "--preset", "tiny", "--iterations", "1",
        "--noise-seeds", "1", "--promote", "0"], env={"RECIPELAB_CACHE": str(tmp_path / "cache")})

    assert result.exit_code == 0, result.output
    assert calls == ["command"]
    saved = json.loads((campaign / "settings.json").read_text())
    assert isinstance(saved["executor"]["parallel"], int) and saved["precision"] != "auto"
    started = next(json.loads(line) for line in (campaign / "events.jsonl").read_text().splitlines()
               if '"campaign_started"' in line)
    assert (started["parallel"], started["precision"]) == (
        saved["executor"]["parallel"], saved["precision"])
