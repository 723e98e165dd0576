"""The campaign commands' options, generated from the settings tree: each option sets
exactly one settings field, each field a user sets has an option, a default is written once,
in the field, for the help to show, and every spelling a user typed before still works."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from recipelab.agent.setup.settings import CampaignSettings
from recipelab.cli import app
from recipelab.cli.night import STRESS_SETTINGS
from recipelab.cli.settings_flags import (
    Flag,
    description,
    given_settings,
    no_name,
    setting_default,
    settings_flags,
    shown,
)

SETTINGS_KEPT_OFF_THE_COMMAND_LINE = {
    "name": "run's own --name, passed apart: a resume keeps the saved name",
    "corpus.text_column": "the Parquet column a corpus file names, read from the file",
    "corpus.val_fraction": "the validation share, fixed so that every campaign's val_bpb compares",
    "corpus.cache_dir": "where tokenized text is cached, the same for every campaign",
    "ladder.stress_log_every": "the stress curve's resolution, fixed for the report's plots",
    "ladder.stress_checkpoint_every": "how often a stress run can resume from, not a choice",
    "search.skip_checks": "for specifications and benchmarks that train what a guardrail refuses",
    "window.max_consecutive_rejections": "a guard against a proposer stuck on refused edits",
}
"""Settings fields a user does not set from ``run``, and why."""

EARLIER_OPTIONS = (
    "--target", "--preset", "--budget", "--corpus", "--corpus-max-bytes", "--iterations",
    "--hours", "--until", "--trial-timeout", "--max-consecutive-failures", "--promote",
    "--top-seeds", "--close-call-seeds", "--stress-steps", "--fidelity", "--eta", "--rung-size",
    "--rung-steps", "--horizon-rule", "--repeat-text", "--attribution", "--width-rung",
    "--proposer", "--llm-base-url", "--llm-model", "--llm-share", "--llm-ready-timeout-s",
    "--llm-structured-output", "--sampler", "--seed", "--device", "--memory-reserve-gib",
    "--searchable", "--edit", "--calibrate-from", "--noise-seeds", "--executor", "--ray-address",
    "--parallel", "--precision", "--threads", "--compile-stress", "--db", "--mlflow-uri",
)
"""Every settings option ``run`` had before its options were generated, as users typed them:
each must keep working (a renamed option keeps its old name for a release at least)."""


@functools.cache
def command(name: str) -> Any:
    """A command as typer builds it for click."""
    return typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


def parsed(name: str, args: list[str]) -> dict[str, Any]:
    """``args`` parsed by the command ``name`` as a user's shell would give them."""
    return dict(command(name).make_context(name, args).params)


def spellings(name: str) -> dict[str, str]:
    """Every option string ``name`` accepts, hidden ones included, by its parameter."""
    return {option: param.name for param in command(name).params
            for option in (*param.opts, *param.secondary_opts)}


def example(flag: Flag) -> str:
    """A value of ``flag``'s type as typed on a command line."""
    values = {"target": "toy", "preset": "tiny", "corpus.source": "python-docs",
              "window.until": "07:30", "executor.parallel": "2", "search.edits":
              '{"optimizer.lr": 0.005}', "search.calibrate_from": "old-campaign"}
    if flag.path in values:
        return values[flag.path]
    choices = getattr(flag.parsed_as, "__args__", None)
    if choices and flag.parsed_as is not list[str]:
        return str(choices[-1])
    return {int: "3000", float: "0.5", str: "x", list[str]: "x"}[flag.parsed_as]


def as_args(name: str, flag: Flag) -> list[str]:
    if flag.parsed_as is bool:
        return [no_name(name)]  # off: every switch's default is not always off
    return [name, example(flag)]


def parsed_default(text: str) -> Any:
    """A default as the help shows it, read back: on/off, 1,000, 0.3, tpe."""
    if text in ("on", "off"):
        return text == "on"
    number = text.replace(",", "")
    if re.fullmatch(r"-?\d+", number):
        return int(number)
    if re.fullmatch(r"-?\d+\.\d*", number):
        return float(number)
    return text


def settings_fields() -> set[str]:
    """Every field a campaign's settings hold, one level into each part, by path."""
    found = set()
    for name, field in CampaignSettings.model_fields.items():
        inner = getattr(field.annotation, "model_fields", None)
        found |= {f"{name}.{leaf}" for leaf in inner} if inner else {name}
    return found


def test_every_field_a_user_sets_has_one_option_and_the_rest_say_why() -> None:
    paths = [flag.path for flag in settings_flags()]
    assert len(paths) == len(set(paths))
    assert set(paths) <= settings_fields()
    assert settings_fields() - set(paths) == set(SETTINGS_KEPT_OFF_THE_COMMAND_LINE)


def test_the_canonical_spelling_is_the_settings_path() -> None:
    flags = {flag.path: flag for flag in settings_flags()}
    assert flags["ladder.promote"].name == "--ladder.promote"
    assert flags["window.trial_timeout_s"].name == "--window.trial-timeout-s"
    assert flags["proposer.kind"].name == "--proposer.kind"
    assert (flags["preset"].name, flags["preset"].alias) == ("--preset", None)
    assert no_name("--ladder.horizon-rule") == "--ladder.no-horizon-rule"
    assert no_name("--horizon-rule") == "--no-horizon-rule"


@pytest.mark.parametrize("command_name", ["run", "check"])
def test_every_earlier_spelling_still_sets_its_setting(command_name: str) -> None:
    """Each option a user typed before parses to the same settings as its nested name."""
    accepted = spellings(command_name)
    by_spelling = {flag.alias or flag.name: flag for flag in settings_flags()}
    assert set(EARLIER_OPTIONS) == set(by_spelling), "an earlier option lost its spelling"
    for earlier in EARLIER_OPTIONS:
        flag = by_spelling[earlier]
        assert earlier in accepted, f"{command_name} no longer accepts {earlier}"
        through_alias = given_settings(parsed(command_name, as_args(earlier, flag)))
        canonical = given_settings(parsed(command_name, as_args(flag.name, flag)))
        assert through_alias == canonical != {}, earlier


def test_help_shows_the_nested_names_and_hides_the_aliases() -> None:
    shown_names = {option for param in command("run").params if not param.hidden
                   for option in param.opts}
    assert "--ladder.promote" in shown_names and "--promote" not in shown_names
    assert "--promote" in spellings("run")


def test_stress_takes_its_settings_from_the_same_fields_and_keeps_the_campaigns() -> None:
    """``stress`` works on a saved campaign: an option left out keeps its value there."""
    helps = {param.name: param.help for param in command("stress").params}
    for path in STRESS_SETTINGS:
        assert helps[path.replace(".", "__")] == f"{description(path)} (default: the campaign's)"


def test_both_spellings_with_two_values_are_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["check", "--dir", str(tmp_path / "c"), "--promote", "1",
                                      "--ladder.promote", "2"])
    assert result.exit_code == 2
    assert "--ladder.promote 2 and its alias --promote 1 are both given" in result.output


def test_given_settings_are_nested_and_leave_out_what_was_not_given(tmp_path: Path) -> None:
    calibration = tmp_path / "old"
    given = given_settings(parsed("run", [
        "--promote", "1", "--window.iterations", "4", "--corpus", "python-docs",
        "--calibrate-from", str(calibration), "--edit", '{"optimizer.lr": 0.005}',
        "--no-width-rung"]))
    assert given == {"ladder": {"promote": 1, "width_rung": False},
                     "window": {"iterations": 4}, "corpus": {"source": "python-docs"},
                     "search": {"calibrate_from": (str(calibration.resolve()),),
                                "edits": ({"optimizer.lr": 0.005},)}}
    assert given_settings(parsed("run", [])) == {}


@pytest.mark.parametrize("flag", settings_flags(), ids=lambda flag: flag.path)
def test_no_help_states_a_default_other_than_its_fields(flag: Flag) -> None:
    """A default is written once, in the settings field: the help shows it as
    ``(default: VALUE`` read from there, at most once, and a field whose default is None
    says what that means instead of naming a value."""
    default = setting_default(flag.path)
    mentions = re.findall(r"default", flag.help, flags=re.IGNORECASE)
    stated = re.findall(r"\(default: (.+?)(?:, |\))", flag.help)
    assert len(mentions) == len(stated) <= 1, f"a default stated by hand: {flag.help!r}"
    if default is None or default == ():
        assert not stated or parsed_default(stated[0]) == stated[0]
    else:
        assert stated and parsed_default(stated[0]) == default, (flag.path, flag.help)


@pytest.mark.parametrize("flag", settings_flags(), ids=lambda flag: flag.path)
def test_the_help_default_is_what_a_bare_campaign_uses(flag: Flag) -> None:
    """The default a nested setting shows is its parent's default as the campaign sets it
    (the corpus: python-source), not the default of the parent's class (python-docs)."""
    used: Any = CampaignSettings(name="bare")
    for part in flag.path.split("."):
        used = getattr(used, part)
    assert setting_default(flag.path) == used or flag.path == "target"  # the preset's


def test_a_default_is_shown_as_a_person_reads_it() -> None:
    assert shown(0.3) == "0.3" and shown("tpe") == "tpe" and shown(False) == "off"
    assert shown(600.0) == "600" and shown(1000) == "1,000"
    with pytest.raises(ValueError, match="the setting name has no default"):
        setting_default("name")

