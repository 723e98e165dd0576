"""``recipelab run``'s options against the campaign settings: each option sets exactly one
settings field, each field a user sets has an option, and a default is written once, in the
field, for the help to show."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer

from recipelab.agent.settings import (
    COMPONENTS,
    FLAT_KEYS,
    CampaignSettings,
    ExecutorSettings,
    LadderSettings,
    WindowSettings,
    save,
)
from recipelab.cli import app
from recipelab.cli.campaign_start import resolve_settings
from recipelab.cli.run_options import (
    CLI_ONLY_OPTIONS,
    option_setting,
    setting_default,
    settings_options,
    shown,
    with_default,
)
from recipelab.trainer.spec import CorpusSpec

SETTINGS_KEPT_OFF_THE_COMMAND_LINE = {
    "ladder.stress_log_every": "the stress curve's resolution, fixed for the report's plots",
    "ladder.stress_checkpoint_every": "how often a stress run can resume from, not a choice",
    "search.skip_checks": "for specifications and benchmarks that train what a guardrail refuses",
    "window.max_consecutive_rejections": "a guard against a proposer stuck on refused edits",
}
"""Settings fields a user does not set from ``run``, and why."""

IDENTITY = [name for name in CampaignSettings.model_fields if name not in COMPONENTS]
"""The top-level fields: the campaign's identity (``corpus`` is reached through its parts)."""


def run_options() -> dict[str, str]:
    """``run``'s options as a user meets them: their help, by parameter name."""
    command: Any = typer.main.get_command(app)  # typer's own (vendored) click command
    return {param.name: param.help or "" for param in command.commands["run"].params}


def settings_fields() -> set[str]:
    """Every field a campaign's settings hold, as the path an option sets."""
    return set(IDENTITY) | {f"{c}.{f}" for c, model in COMPONENTS.items() for f in model.model_fields}


def parsed(text: str) -> Any:
    """A default as the help shows it, read back: on/off, 1,000, 0.3, tpe."""
    if text in ("on", "off"):
        return text == "on"
    number = text.replace(",", "")
    if re.fullmatch(r"-?\d+", number):
        return int(number)
    if re.fullmatch(r"-?\d+\.\d*", number):
        return float(number)
    return text


def test_every_run_option_sets_exactly_one_settings_field() -> None:
    """A new knob is a settings field and a ``run`` option; the options that are no setting
    say why, and no two options set the same field."""
    fields = settings_fields()
    paths: dict[str, str] = {}
    for option in run_options():
        path = option_setting(option)
        if path is None:
            assert CLI_ONLY_OPTIONS.get(option), f"--{option} is no setting and says not why"
            continue
        field = path if path.split(".")[0] in COMPONENTS else path.split(".")[0]
        assert field in fields, f"--{option} sets {path}, which is no settings field"
        if field == "corpus":
            assert path.split(".")[1] in CorpusSpec.model_fields, f"--{option} sets {path}"
        assert path not in paths.values(), f"--{option} and another option both set {path}"
        paths[option] = path
    assert set(CLI_ONLY_OPTIONS) == set(run_options()) - set(paths)


def test_every_settings_field_a_user_sets_has_a_run_option() -> None:
    reached = {path if path.split(".")[0] in COMPONENTS else path.split(".")[0]
               for option in run_options() if (path := option_setting(option)) is not None}
    assert settings_fields() - reached == set(SETTINGS_KEPT_OFF_THE_COMMAND_LINE)


def test_an_option_named_like_a_settings_field_is_its_flat_key() -> None:
    """``--promote`` sets ``ladder.promote``, ``--proposer`` the proposer's ``kind``: the
    same flat spelling old settings files and keyword construction use."""
    assert option_setting("promote") == "ladder.promote"
    assert option_setting("proposer") == "proposer.kind"
    assert option_setting("executor") == "executor.kind"
    assert option_setting("preset") == "preset"
    assert option_setting("directory") is None
    assert all(option_setting(flat) == ".".join(path) for flat, path in FLAT_KEYS.items()
               if flat in run_options())


@pytest.mark.parametrize("option", sorted(run_options()))
def test_no_help_states_a_default_other_than_its_fields(option: str) -> None:
    """A default is written once, in the settings field: the help shows it as
    ``(default: VALUE`` read from there, says it at most once, and a field whose default is
    None explains what that means instead of naming a value."""
    help_text = run_options()[option]
    path = option_setting(option)
    mentions = re.findall(r"default", help_text, flags=re.IGNORECASE)
    if path is None:
        assert not mentions, f"--{option} is no setting, yet its help states a default"
        return
    default = None if path == "name" else setting_default(path)  # the name has none
    stated = re.findall(r"\(default: (.+?)(?:, |\))", help_text)
    assert len(mentions) == len(stated) <= 1, (
        f"--{option}: a default stated by hand, not as '(default: ...)' from the field: {help_text!r}")
    if default is None or default == ():
        assert not stated or parsed(stated[0]) == stated[0], (
            f"--{option} defaults to {default!r}, yet its help names the value {stated[0]!r}")
    else:
        assert stated, f"--{option} defaults to {default!r}; its help should say so"
        assert parsed(stated[0]) == default, (
            f"--{option}: the help says the default is {stated[0]!r}, the field {default!r}")


@pytest.mark.parametrize("option", sorted(run_options()))
def test_the_help_default_is_what_a_bare_campaign_uses(option: str) -> None:
    """The default a nested setting shows is its parent's default as the campaign sets it
    (the corpus: python-source), not the default of the parent's class (python-docs)."""
    path = option_setting(option)
    if path is None or path == "name" or setting_default(path) is None:
        return  # None: filled in on validation (the preset's target), as its help says
    used: Any = CampaignSettings(name="bare")
    for part in path.split("."):
        used = getattr(used, part)
    assert setting_default(path) == used


def test_the_help_default_is_read_from_the_field() -> None:
    promote = LadderSettings.model_fields["promote"].default
    assert with_default("promote", "finalists") == f"finalists (default: {promote})"
    assert with_default("stress_steps", "steps") == "steps (default: 1,000)"
    assert with_default("horizon_rule", "rule") == "rule (default: on)"
    assert with_default("trial_timeout", "seconds") == "seconds (default: 600)"
    assert shown(0.3) == "0.3" and shown("tpe") == "tpe" and shown(False) == "off"


def test_a_default_that_cannot_be_shown_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="the setting name has no default"):
        with_default("name", "campaign name")
    with pytest.raises(ValueError, match="--directory is no campaign setting"):
        with_default("directory", "campaign directory")
    with pytest.raises(ValueError, match=r"--threads defaults to None: say what that means"):
        with_default("threads", "CPU threads per trial")


def test_a_resume_keeps_the_saved_name_and_takes_the_options_given(tmp_path: Path) -> None:
    """``--dir`` resumes whatever campaign is there: the name option (default ``default``)
    must not rename it, while an option given changes its field."""
    assert "name" not in settings_options(dict.fromkeys(run_options()))
    save(CampaignSettings(name="overnight", precision="fp32", executor=ExecutorSettings(parallel=1),
                          window=WindowSettings(iterations=3)), tmp_path)
    resolved, new = resolve_settings(tmp_path, "default", {"promote": 0, "iterations": 5})
    settings = resolved.settings
    assert not new and settings.name == "overnight"
    assert (settings.ladder.promote, settings.window.iterations) == (0, 5)
