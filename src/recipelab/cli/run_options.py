"""``run``'s options and the campaign settings they set: which options are no setting, which
are converted, and each option's help with its setting's default."""

from __future__ import annotations

from typing import Any

from recipelab.agent import settings as settings_store
from recipelab.agent.settings import CampaignSettings, LadderSettings
from recipelab.recipe import PROXY_PRESETS

CLI_ONLY_OPTIONS = {
    "directory": "where the campaign lives, not what it does: its settings are saved inside it",
    "skip_preflight": "a choice for this start only; the next start runs the preflight again",
    "log_format": "how this start's console looks; events.jsonl is the same whatever it is",
}
"""``run``'s options that are no campaign setting, and why."""

CONVERTED_OPTIONS = {"corpus": "corpus.source", "corpus_max_bytes": "corpus.max_bytes",
                     "trial_timeout": "window.trial_timeout_s"}
"""``run``'s options that are not spelt as the flat key of their setting, by the setting's
path: :func:`launch` converts each. Every other option is the settings field its flat key
names (:data:`recipelab.agent.settings.FLAT_KEYS`), passed as given (tests/test_cli_settings.py
checks that the two stay in step)."""


def option_setting(option: str) -> str | None:
    """The settings path ``run``'s ``option`` sets (``ladder.promote``), or None for an
    option that is no setting."""
    if option in CLI_ONLY_OPTIONS:
        return None
    if option in CONVERTED_OPTIONS:
        return CONVERTED_OPTIONS[option]
    if option in settings_store.FLAT_KEYS:
        return ".".join(settings_store.FLAT_KEYS[option])
    return option


def setting_default(path: str) -> Any:
    """The default of the settings field at ``path`` (``ladder.promote``, ``corpus.source``):
    the one place a default is written."""
    first, *rest = path.split(".")
    field = CampaignSettings.model_fields[first]
    if field.is_required():
        raise ValueError(f"the setting {path} has no default: every campaign gives its own")
    value: Any = field.get_default(call_default_factory=True)
    for part in rest:  # the parent's default as the campaign sets it, not its class's
        value = getattr(value, part)
    return value


def shown(value: Any) -> str:
    """A default as a person reads it: on/off, 1,000, 600, tpe."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, int) else str(value)


def with_default(option: str, text: str, meaning: str | None = None) -> str:
    """``run``'s help for ``option``: ``text`` and the default of its settings field, read
    from the field, never restated by hand. ``meaning`` says what a default of None or
    ``auto`` comes to, or adds to a literal default (``0, or 24 on unified memory``)."""
    path = option_setting(option)
    if path is None:
        raise ValueError(f"--{option.replace('_', '-')} is no campaign setting: it has no "
                         "settings default to show; write its help without with_default")
    default = setting_default(path)
    if default is None:
        if meaning is None:
            raise ValueError(f"--{option.replace('_', '-')} defaults to None: say what that means "
                             "(meaning=...) or leave the default out of its help")
        return f"{text} (default: {meaning})"
    return f"{text} (default: {shown(default)}{f', {meaning}' if meaning else ''})"


def default_ladder() -> str:
    """The rungs the default settings climb from the default preset's proxy, for ``--eta``'s
    help: computed, so the example follows the defaults."""
    preset = setting_default("preset")
    proxy = PROXY_PRESETS[preset].steps
    rungs = ", ".join(f"{steps:,}" for steps in [proxy, *LadderSettings().ladder_steps(proxy)])
    return f"which climbs {rungs} steps from the {preset} preset's {proxy}-step proxy"


PASSED_APART = frozenset({"name", "searchable", "edits", "calibrate_from"})
"""Settings options :func:`launch` passes on its own: the name only for a new campaign (a
resume keeps the saved one), the lists as tuples (edits parsed from JSON, calibration paths
made absolute)."""


def settings_options(options: dict[str, Any]) -> set[str]:
    """The options passed to the settings as given, by their flat key."""
    return {key for key in options
            if key not in CLI_ONLY_OPTIONS and key not in CONVERTED_OPTIONS and key not in PASSED_APART}
